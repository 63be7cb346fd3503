"""The JAX internals the plugin's opt-ins rely on (JAX 0.10.2 has no public or
plugin-facing way for these; docs/runtime.md, "JAX internals the plugin
relies on"). Each test pins the assumption, so that a JAX that changes it
fails here with the reason, not somewhere as a silently lost feature; and
each says what to do when a public way appears.

1. Donation: JAX lowers donations only for the platforms on
   ``jax._src.interpreters.mlir._platforms_with_donation``.
2. Compilation cache: JAX uses its persistent cache only for the platforms
   named inside ``jax._src.compilation_cache.is_cache_used``.
3. Ctrl-C: a KeyboardInterrupt is raised in the caller's frame by a one-shot
   trace function (Python's tracing API, not JAX's), which relies on jaxlib
   calling Execute synchronously from that frame; jaxlib's own signal polling
   (BlockUntilReadyWithCancel) covers compiles on its worker threads.
4. DLPack import onto a stablehlo_ref device calls jaxlib's
   ``dlpack_managed_tensor_to_buffer`` (see test_jax_runtime_dlpack.py).
"""

import inspect
import json
import os
import subprocess
import sys

from testkit import requires_jax_feature

SCRIPT = r"""
import json, logging, sys
import jax, jax.numpy as jnp
out = {}
records = []
class Keep(logging.Handler):
    def emit(self, r): records.append(r.getMessage())
logging.getLogger("stablehlo_pjrt").addHandler(Keep())
if sys.argv[1] == "break":
    # JAX "changes": the donation list becomes a tuple, the cache check
    # takes other arguments. Plugin initialization must still succeed, loudly.
    from jax._src.interpreters import mlir
    from jax._src import compilation_cache as cc
    mlir._platforms_with_donation = tuple(mlir._platforms_with_donation)
    cc.is_cache_used = lambda backend, extra=None: False
dev = jax.devices("stablehlo_ref")[0]
out["warnings"] = records
x = jax.device_put(jnp.arange(4.0), dev)
f = jax.jit(lambda a: a * 2, donate_argnums=0)
out["aliasing"] = "tf.aliasing_output" in f.lower(x).as_text()
if sys.argv[1] == "break":
    print(json.dumps(out)); sys.exit(0)
from jax._src import compilation_cache as cc
from jax._src import xla_bridge
out["cache_check_wrapped"] = getattr(cc.is_cache_used, "_stablehlo_ref_platform", None)
jax.config.update("jax_compilation_cache_dir", sys.argv[2])
out["cache_used"] = cc.is_cache_used(xla_bridge.get_backend("stablehlo_ref"))
print(json.dumps(out))
"""


def _run(mode, tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="stablehlo_ref")
    env.pop("STABLEHLO_REF_NUM_DEVICES", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_hooks_work(tmp_path):
    out = _run("ok", tmp_path)
    assert out["warnings"] == []
    assert out["aliasing"] is True
    assert out["cache_check_wrapped"] == "stablehlo_ref"
    assert out["cache_used"] is True


def test_a_changed_jax_is_reported_not_fatal(tmp_path):
    out = _run("break", tmp_path)
    assert out["aliasing"] is False  # donation off, as JAX's warning then says
    text = "\n".join(out["warnings"])
    import jax
    assert f"stablehlo_ref: buffer donation is off: JAX {jax.__version__} differs from the " \
        "JAX internals" in text, text
    assert "stablehlo_ref: the persistent compilation cache is off" in text, text


def test_jax_consults_the_donation_list():
    """If this fails because JAX lists stablehlo_ref or offers a registration,
    use that and drop jax_plugin.enable_donation."""
    from jax._src.interpreters import mlir
    assert isinstance(mlir._platforms_with_donation, list)
    source = inspect.getsource(mlir)
    line = next(ln for ln in source.splitlines() if ln.startswith("_platforms_with_donation ="))
    assert "stablehlo_ref" not in line
    assert "_platforms_with_donation" in inspect.getsource(mlir.lower_jaxpr_to_module)


def test_jax_consults_the_cache_check_through_the_module():
    """The wrapper replaces the module attribute: JAX must look it up there
    at call time (``compilation_cache.is_cache_used(backend)``), and its
    platform list must still be private to the function."""
    from jax._src import compilation_cache as cc
    from jax._src import compiler
    assert "compilation_cache.is_cache_used(backend)" in inspect.getsource(compiler)
    original = getattr(cc.is_cache_used, "__wrapped__", cc.is_cache_used)
    assert list(inspect.signature(original).parameters) == ["backend"]
    assert 'supported_platforms = ["tpu", "gpu", "cpu", "neuron"]' in inspect.getsource(original)


@requires_jax_feature("compile_on_worker_thread")
def test_jaxlib_polls_for_signals_while_waiting():
    """Ctrl-C during a JAX compile is jaxlib's (it compiles on a worker and
    the waiting thread checks for signals); the plugin's trace function
    handles what runs on the main thread. jaxlib does not expose the wait,
    so this pins the documented Python-visible part: a stablehlo_ref compile
    runs on a thread that is not Python's main thread."""
    script = r"""
import threading, jax, jax.numpy as jnp
import stablehlo_pjrt.api as api
seen = []
orig = api.compile_args
def spy(*a):
    seen.append(threading.current_thread() is threading.main_thread())
    return orig(*a)
api.compile_args = spy
jax.jit(lambda v: v + 1)(jax.device_put(jnp.ones(2), jax.devices("stablehlo_ref")[0]))
print(seen)
"""
    env = dict(os.environ, JAX_PLATFORMS="stablehlo_ref")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1].lower())
    assert seen and not any(seen), seen  # (device_put compiles too)
