"""A guided tour of the stablehlo_ref PJRT plugin (run me; docs/tour.md explains).

Follows `jax.jit(lambda x: jnp.power(x, jnp.int32(2)))(1)` through the plugin,
one step at a time, with the PJRT call trace on: every line starting with
`[stablehlo_pjrt]` is printed by the plugin (stablehlo_pjrt/trace.py) while
it serves that call. Everything goes to stderr so that our step headers and
the plugin's lines stay in order:

    python docs/tour.py
"""

import gc
import os
import sys

# Both must be set before JAX loads the plugin: the plugin reads
# STABLEHLO_PJRT_TRACE when it builds its PJRT_Api table.
os.environ["JAX_PLATFORMS"] = "stablehlo_ref"
os.environ["STABLEHLO_PJRT_TRACE"] = "1"


def step(title):
    print(f"\n=== {title}", file=sys.stderr, flush=True)


def say(*args):
    print(*args, file=sys.stderr, flush=True)


# --- Step 1: loading the plugin, the client, devices and memory spaces -------
step("1. loading the plugin: client, devices, memory spaces")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

devices = jax.devices()  # JAX initializes its backends on first use
say("jax.devices() ->", devices)
say("memory spaces of the device ->", devices[0].addressable_memories())

# --- Step 2: the program JAX sends -------------------------------------------
step("2. tracing and lowering: the program JAX will send")
f = jax.jit(lambda x: jnp.power(x, jnp.int32(2)))
lowered = f.lower(1)
say(lowered.as_text())

# --- Step 3: compile -----------------------------------------------------------
step("3. compile: PJRT_Client_Compile")
compiled = lowered.compile()

# --- Step 4: the argument goes to the device, the program runs -----------------
step("4. execute: BufferFromHostBuffer, Execute, events")
out = compiled(1)

# --- Step 5: the result comes back ---------------------------------------------
step("5. the result comes back: read in place")
value = int(out)
say("result ->", value)

# --- Step 6: destruction -----------------------------------------------------
step("6. destruction: buffers and executables")
del out, compiled, lowered, f
gc.collect()

step("end of the tour")
assert value == 1, value
