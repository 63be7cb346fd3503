"""The data path between processes of a stablehlo_ref client (docs/devices.md).

    python -m benchmarks.multiprocess_transport [--max-mb 64] [--repeat 3]

Starts 2 processes on localhost (jax.distributed, 2 devices each) and times,
for payloads of 1 KB to 64 MB per process:

* ``exchange``: one round of the plugin's key-value store exchange
  (distributed.Cluster.allgather: put this process's part, get the other's),
  the step every program spanning processes takes;
* ``jit``: ``jit(lambda a: a + 1)`` on an f32 array sharded over the 4
  devices (the exchange, the interpreter's run and JAX's dispatch).

Prints a markdown table (median of ``--repeat`` runs, process 0's clock).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

from stablehlo_pjrt import config

SIZES = [1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def _worker(pid, port, min_bytes, max_bytes, repeat, constant):
    import jax
    jax.config.update("jax_platforms", "stablehlo_ref")
    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=pid)
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from stablehlo_pjrt import handles
    from stablehlo_pjrt.client import Client

    jax.devices()
    (client,) = [o for o in list(handles._objects.values()) if isinstance(o, Client)]
    cluster = client.cluster
    participants = (0, 1)
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    sharding = NamedSharding(mesh, P("x"))
    step = jax.jit(lambda a: a + 1)
    rows = []
    for size in [s for s in SIZES if min_bytes <= s <= max_bytes]:
        payload = b"\x01" * size if constant else os.urandom(size)
        # One untimed round first: both processes leave it together, so the
        # timed rounds measure the exchange, not one process waiting for the other.
        cluster.allgather(participants, cluster.next_tag(participants), payload, "bench")
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            cluster.allgather(participants, cluster.next_tag(participants), payload, "bench")
            times.append(time.perf_counter() - t0)
        exchange = sorted(times)[len(times) // 2]
        # A global f32 array of 2 * size bytes: each process holds `size`.
        n = max(4, (2 * size // 4) // 4 * 4)
        local = np.ones(n // 2, np.float32)
        arr = jax.make_array_from_process_local_data(sharding, local)
        step(arr).block_until_ready()  # compile (and a round that syncs the processes)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            step(arr).block_until_ready()
            times.append(time.perf_counter() - t0)
        rows.append({"bytes": size, "exchange_s": exchange,
                     "jit_s": sorted(times)[len(times) // 2]})
    if pid == 0:
        print(json.dumps(rows), flush=True)
    jax.distributed.shutdown()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-mb", type=float, default=64)
    ap.add_argument("--min-mb", type=float, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--constant", action="store_true",
                    help="one repeated byte instead of random bytes (JAX's client "
                         "compresses its messages: see docs/devices.md)")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    max_bytes = int(args.max_mb * (1 << 20))
    if args.worker is not None:
        _worker(args.worker, args.port, int(args.min_mb * (1 << 20)), max_bytes, args.repeat,
                args.constant)
        return
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = config.child_environ(extra={"STABLEHLO_REF_NUM_DEVICES": "2"})
    cmd = [sys.executable, "-m", "benchmarks.multiprocess_transport", "--port", str(port),
           "--max-mb", str(args.max_mb), "--min-mb", str(args.min_mb), "--repeat", str(args.repeat)]
    cmd += ["--constant"] * args.constant + ["--worker"]
    procs = [subprocess.Popen(cmd + [str(i)], stdout=subprocess.PIPE, env=env, text=True)
             for i in range(2)]
    out = [p.communicate()[0] for p in procs]
    rows = json.loads([line for line in out[0].splitlines() if line.startswith("[")][-1])
    print("| payload per process | exchange (latency) | exchange MB/s | jit a+1 (4 devices) |")
    print("|---|---|---|---|")
    for r in rows:
        b = r["bytes"]
        label = f"{b >> 20} MB" if b >= 1 << 20 else f"{b >> 10} KB"
        # Each process sends `b` bytes and receives `b` bytes in one round.
        print(f"| {label} | {r['exchange_s'] * 1e3:.2f} ms | "
              f"{b / r['exchange_s'] / 1e6:.1f} | {r['jit_s'] * 1e3:.2f} ms |")


if __name__ == "__main__":
    main()
