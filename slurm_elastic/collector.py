"""Python's cyclic garbage collector, paused for work that allocates much and builds no cycle.

This module owns :func:`gc_paused`. Reading a large queue and planning it allocate millions of
objects that form no cycles (reference counting frees them); each burst of allocations triggers
collections that walk the young generation, and, every few bursts, the whole heap. At 50,000 jobs a
full collection walks several hundred thousand long-lived objects (the records and jobs kept from
round to round) and took 0.29 s, in every round's plan (``bench observe``). The observer pauses
the collector while it reads and builds; the daemon pauses it for a whole round (observe, plan,
act), so its collections run between rounds, after the round's decisions are made.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block, then restore it as it was (one paused by
    someone else stays paused).

    Measured on a 50,000-job observation (``bench observe``, before the reader kept only the keys
    it reads): JSON decode 8.1 s -> 2.8 s, snapshot 1.6 s -> 1.0 s with the collector paused.
    Reference counting still frees everything; the collector runs again after.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
