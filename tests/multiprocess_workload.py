"""One process of a multi-process JAX program (tests/test_multiprocess.py).

    python tests/multiprocess_workload.py PROCESS_ID NUM_PROCESSES PORT PLATFORM [MODE]

PLATFORM is stablehlo_ref or cpu (XLA CPU with gloo collectives); each
process has 2 devices (STABLEHLO_REF_NUM_DEVICES / jax_num_cpu_devices).
NUM_PROCESSES 1 runs the same program in one process (with all the devices:
the caller sets STABLEHLO_REF_NUM_DEVICES), without jax.distributed.
Prints one JSON line: the values every step produced (float results as the
hex of their bytes, so that the caller compares bits).

MODE "die": process 1 exits abruptly before the first collective program,
the others report the error they get (and exit without JAX's shutdown
barrier, which would wait for the dead process).
"""

import faulthandler
import json
import os
import sys
import time

import numpy as np

if os.environ.get("WORKLOAD_DEADLINE"):
    # A hang shows where it is (stderr) instead of running into the caller's timeout.
    faulthandler.dump_traceback_later(float(os.environ["WORKLOAD_DEADLINE"]), exit=True)

pid, nproc, port, platform = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
mode = sys.argv[5] if len(sys.argv) > 5 else "scenario"

import jax  # noqa: E402

if platform == "cpu":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # As many devices per process as the reference gets.
    jax.config.update("jax_num_cpu_devices", int(os.environ.get("STABLEHLO_REF_NUM_DEVICES", "2")))
jax.config.update("jax_platforms", platform)
if nproc > 1:
    jax.distributed.initialize(f"localhost:{port}", num_processes=nproc, process_id=pid,
                               initialization_timeout=60)

import jax.numpy as jnp  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map


def bits(x):
    a = np.asarray(x)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "hex": a.tobytes().hex()}


out = {"process_count": jax.process_count(), "process_index": jax.process_index(),
       "devices": [[d.id, d.process_index] for d in jax.devices()],
       "local_devices": [d.id for d in jax.local_devices()]}
devices = jax.devices()
n = len(devices)
mesh = jax.sharding.Mesh(np.array(devices), ("x",))
rows = n  # rows per device (psum_scatter and all_to_all split them n ways)
rng = np.random.default_rng(0)
# The global data (the same in every process); each process passes its rows.
global_data = rng.standard_normal((rows * n, 8)).astype(np.float32)
sharding = NamedSharding(mesh, P("x"))
per_process = rows * n // jax.process_count()
local_data = global_data[jax.process_index() * per_process:
                         (jax.process_index() + 1) * per_process]

if mode == "die":
    if jax.process_index() == 1:
        os._exit(3)  # dies without a word, before the first exchange
    arr = jax.make_array_from_process_local_data(sharding, local_data)
    t0 = time.monotonic()
    try:
        float(jax.jit(lambda a: jnp.sum(a))(arr))
        out["error"] = None
    except Exception as e:  # noqa: BLE001 - the error is what we report
        out["error"] = f"{type(e).__name__}: {e}"
    out["seconds"] = time.monotonic() - t0
    print(json.dumps(out), flush=True)
    os._exit(0)

arr = jax.make_array_from_process_local_data(sharding, local_data)
out["global_shape"] = list(arr.shape)
out["addressable_shards"] = [[s.device.id, s.index[0].start] for s in arr.addressable_shards]

# A reduction under jit (XLA would all-reduce the partial sums).
out["jit_sum"] = bits(jax.jit(lambda a: jnp.sum(a * a, axis=0))(arr))
out["jit_matmul"] = bits(jax.jit(lambda a: a.T @ a)(arr))


def collectives(x):
    i = jax.lax.axis_index("x")
    return (jax.lax.psum(x, "x"),
            jax.lax.all_gather(x, "x", tiled=True),
            jax.lax.psum_scatter(x, "x", scatter_dimension=0, tiled=True),
            jax.lax.all_to_all(x, "x", 0, 0, tiled=True),
            jax.lax.ppermute(x, "x", [(k, (k + 1) % n) for k in range(n)]),
            jax.lax.pmax(x, "x"),
            jax.lax.psum(x * (i + 1).astype(x.dtype), "x"))


specs = (P(), P(), P("x"), P("x"), P("x"), P(), P())
f = jax.jit(shard_map(collectives, mesh=mesh, in_specs=P("x"), out_specs=specs,
                      check_vma=False))
names = ["psum", "all_gather", "psum_scatter", "all_to_all", "ppermute", "pmax", "psum_weighted"]
for name, value in zip(names, f(arr)):
    # Every process reads the whole value (process_allgather of sharded ones).
    whole = value if value.is_fully_replicated else multihost_utils.process_allgather(
        value, tiled=True)
    out[name] = bits(whole)

out["process_allgather"] = bits(multihost_utils.process_allgather(arr, tiled=True))
# pmap (replicas): a psum over every device of every process.
position = [devices.index(d) for d in jax.local_devices()]  # (XLA CPU's ids are not 0..n-1)
local = np.stack([global_data[k * rows:(k + 1) * rows] for k in position])
summed = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(local)
# (Indexing the global result would be one more program, which XLA CPU runs
# on process 0 alone and waits for process 1 in: read a local shard.)
out["pmap_psum"] = bits(np.asarray(summed.addressable_shards[0].data).reshape(rows, 8))
print(json.dumps(out), flush=True)
if nproc > 1:
    # JAX's atexit shutdown waits for every process at a barrier.
    jax.distributed.shutdown()
