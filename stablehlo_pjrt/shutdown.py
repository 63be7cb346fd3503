"""The plugin's work at interpreter exit, in one atexit handler.

Exit has an order that matters, and atexit runs handlers last registered
first, so each part of the plugin adds a step here instead of registering
its own handler, and :func:`add_step` moves the one handler to the end of
atexit's list again (it then runs before every handler registered so far):

1. PyTorch/XLA's work in flight (``torch_xla_plugin``): torch_xla's own
   atexit handler (``_prepare_to_exit``, registered when torch_xla is
   imported) waits for its device operations while holding the GIL, and
   those operations run on torch_xla's threads, which call into this plugin
   and need the GIL: a deadlock (and, once step 4 has run, an abort on the
   plugin's refusal). The step waits for them first, with
   ``_xla_wait_device_ops``, which releases the GIL.
2. The plugin's own queue (``dispatch``): dispatched programs finish (their
   prints appear) and the worker thread stops.
3. JAX's ordered effects (``table``): JAX's atexit handler waits for their
   runtime tokens with the GIL released, which step 4 would refuse.
4. ``_shim.begin_exit`` (``table``): from then on threads that do not hold
   the GIL are no longer served (a thread waiting for the GIL when
   finalization starts is killed and takes the process down); the calls
   already in progress are waited for.

The handler is moved to the end whenever a step is added: when the PJRT
table is built, at the first asynchronous dispatch, and when PyTorch/XLA
constructs the plugin (during ``import torch_xla``, after torch_xla's
handler, also when JAX built the table first).
"""

from __future__ import annotations

import atexit
import sys
from collections.abc import Callable

# Step orders (lower runs first).
TORCH_XLA, DISPATCH, JAX_EFFECTS, BEGIN_EXIT = 10, 20, 30, 40

_steps: dict[str, tuple[int, Callable[[], object]]] = {}


def add_step(name: str, order: int, fn: Callable[[], object]) -> None:
    """Adds (or replaces) step ``name``; re-registers the exit handler so
    that it runs before the atexit handlers registered so far."""
    _steps[name] = (order, fn)
    atexit.unregister(run)
    atexit.register(run)


def run() -> None:
    """The exit handler: every step in order; a failing step never stops the
    later ones (the last one keeps the process from aborting)."""
    for name, (_, fn) in sorted(_steps.items(), key=lambda kv: kv[1][0]):
        try:
            fn()
        except KeyboardInterrupt:
            pass  # Ctrl-C at exit: go on to the steps that keep exit safe
        except Exception:  # noqa: BLE001 - reported, then the next step
            print(f"stablehlo_pjrt: exit step {name!r} failed:", file=sys.stderr)
            import traceback
            traceback.print_exc()
