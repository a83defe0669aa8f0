"""What every part of the acting step works with: the command runner, the journal, the clock.

This module owns :class:`Hands`, the one object the acting modules share (they hold no other
state of their own but the leases' and the user back-offs'), and the two things every one of them
does to a satellite: cancel it (:meth:`Hands.cancel`) and cancel a job's satellites.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slurm_elastic.errors import ElasticError
from slurm_elastic.store import Store

log = logging.getLogger(__name__)

Runner = Callable[[Sequence[str]], str]
"""Runs one command (an argv list, never a shell string) and returns its stdout; raises on failure."""


@dataclass
class Hands:
    """The acting step's means.

    Attributes:
        runner: runs one Slurm command (argv), returns stdout, raises :class:`ElasticError` on failure.
        store: the action journal, and the jobs' workers, satellites and owed releases.
        clock: seconds since the epoch.
        sleep: waits that many seconds (the requeue path's polls).
        crash: called at each crash point (:mod:`slurm_elastic.slurm.steps`).
        me: the user the daemon runs as (satellites of other users' jobs go through ``setpriv``).
        client: the Slurm client settings a satellite's sbatch keeps
            (:func:`~slurm_elastic.slurm.satellites.client_settings`).
    """

    runner: Runner
    store: Store
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    crash: Callable[[str], None]
    me: str
    client: Sequence[str]

    def cancel(self, sat_id: str) -> None:
        """Cancel a satellite and record it ended (a failing ``scancel`` is logged: it may be gone)."""
        try:
            self.runner(["scancel", sat_id])
        except ElasticError as exc:
            log.warning("satellite %s: scancel failed: %s", sat_id, exc)
        self.store.end_satellite(sat_id, self.clock())

    def cancel_satellites(self, parent: str) -> None:
        """Cancel every satellite of job ``parent``."""
        for sat_id, p in self.store.satellites().items():
            if p == parent:
                self.cancel(sat_id)
