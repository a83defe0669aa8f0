"""How the C library's allocator treats the simulator's short-lived arrays.

This module owns one process-wide setting, made by the commands that simulate (``simulate``,
``reproduce``, ``what-if``, ``bench``, ``train-drl``) and by no other: :func:`keep_freed_memory`.

A simulation allocates and frees arrays of a few hundred kB to a few MB at every round (ONES's
populations, DL2's states). By default glibc gives freed memory at the top of the heap back to
the system once more than 128 kB is free there, and serves blocks above a moving threshold with
``mmap``; the next round then faults the same pages in again. On a 300-job ONES simulation on
640 GPUs that was 8.5 s of system time in 34 s (docs/planners.md, "Planner speed"). Keeping up to
128 MiB of freed heap, growing it 64 MiB at a time and serving blocks under 32 MiB from it
removes most of it, and the peak memory stays the same. The daemon does not call this: a
long-running service keeps glibc's defaults.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

TRIM_THRESHOLD_BYTES = 128 << 20
"""Freed memory at the top of the heap kept before any is given back."""
TOP_PAD_BYTES = 64 << 20
"""Extra memory asked for each time the heap grows."""
MMAP_THRESHOLD_BYTES = 32 << 20
"""Blocks below this come from the heap (and the threshold no longer moves by itself)."""


def keep_freed_memory() -> bool:
    """Set the three thresholds above; ``True`` when the C library took all three.

    ``False`` (nothing to do, nothing raised) where the C library is not glibc or refuses one.
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    settings = ((M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES), (M_TOP_PAD, TOP_PAD_BYTES),
                (M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    # A list, not a generator: every threshold is set, even after the library refuses one.
    return all([mallopt(param, value) == 1 for param, value in settings])
