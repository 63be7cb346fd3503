"""Keep freed array memory for the next run instead of giving it back (glibc).

A plan allocates its intermediate arrays afresh on every run and frees them
as they die. glibc serves allocations of 128 KiB and more with ``mmap`` until
it has seen such a block freed, then raises that threshold to the size of
the freed block and its trim threshold to twice that: the heap is shrunk
(``sbrk`` back to the kernel) whenever more than twice the largest freed
array lies free at its top, which is what the end of every run leaves. The
next run then touches fresh pages: one page fault per 4 KiB, each zeroing
its page. ``jnp.take_along_axis`` of (1000, 1000) f32 took 3318 faults and
4.6 ms of system time per run, half of its 9.4 ms (its arrays total 25 MB);
``jnp.histogram`` of 1e6 6000 faults and 8 ms.

:func:`tune` (called once, by the first compile) fixes the mmap threshold
at glibc's own upper bound of the dynamic one (32 MiB) and the trim
threshold at :data:`TRIM_THRESHOLD` (256 MiB): arrays below 32 MiB come
from the heap, and up to 256 MiB freed at its top stay mapped for the next
run (the process keeps at most that much more resident than it uses).
Larger arrays are still mapped and unmapped per allocation, as before.
XLA CPU in the same process allocates through the same malloc.

Nothing is changed when the C library is not glibc, when the environment
already sets glibc's own tunables (``MALLOC_TRIM_THRESHOLD_``,
``MALLOC_TOP_PAD_``, ``MALLOC_MMAP_THRESHOLD_``, ``GLIBC_TUNABLES``: the
user chose), or when ``STABLEHLO_REF_MALLOC=0``.
"""

import ctypes
import sys
import threading

from . import config as _config

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# DEFAULT_MMAP_THRESHOLD_MAX of 64-bit glibc: the largest value the dynamic
# threshold reaches by itself, and the largest mallopt accepts.
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20
_USER_TUNABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_THRESHOLD_",
                  "GLIBC_TUNABLES")

_lock = threading.Lock()
_done = False
tuned = False   # whether tune() changed malloc's thresholds (for tests and reports)


def tune():
    """Set glibc's mmap and trim thresholds once per process (see the module
    docstring); returns whether they are set by this module."""
    global _done, tuned
    if _done:
        return tuned
    with _lock:
        if _done:
            return tuned
        _done = True
        if not _config.MALLOC.value():
            return False
        if _config.any_set(_USER_TUNABLES) or not sys.platform.startswith("linux") \
                or sys.maxsize < 2**32:
            return False
        try:
            libc = ctypes.CDLL(None)
            if not hasattr(libc, "gnu_get_libc_version"):
                return False   # musl and others: mallopt is absent or a no-op
            mallopt = libc.mallopt
            mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
            mallopt.restype = ctypes.c_int
            # Both or neither: setting either one alone turns glibc's dynamic
            # threshold off and leaves the other at its 128 KiB default.
            tuned = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
                bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        except (OSError, AttributeError):
            tuned = False
        return tuned
