"""Observing, passively: Slurm's records and the daemon's store turned into the core's snapshot.

* :mod:`.snapshot` -- the one function from records to a :class:`~slurm_elastic.core.model.ClusterSnapshot`
  (:func:`~.snapshot.snapshot_of`), satellites folded into their jobs, the change key;
* :mod:`.progress` -- the jobs' signed reports as typed progress rows, and what they say now;
* :mod:`.inflight` -- resizes under way, which the planner must leave alone;
* :mod:`.observation` -- :class:`~.observation.Observation`, one read handed to the acting step;
* :mod:`.view` -- :class:`~.view.ClusterView`, the daemon's observer over either backend.

Nothing here changes Slurm: acting is :mod:`slurm_elastic.act` alone (an import-linter contract
forbids this package to import it).
"""
