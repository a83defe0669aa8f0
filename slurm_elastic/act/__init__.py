"""Acting: the only place that changes Slurm, one module per job of the acting step.

* :mod:`.port` -- :class:`~.port.Actor`, the one interface the daemon acts through: entered with
  one observation (:class:`~slurm_elastic.observe.observation.Observation`) and nothing else;
* :mod:`.actor` -- :class:`~.actor.SlurmActor`, the actor over real Slurm, which sends each action
  and each poll's owed work to the module that owns it;
* :mod:`.commands` -- start, drop, preempt, and the requeue path of jobs without the launcher;
* :mod:`.grow` -- a launcher job grown in place: the order, its satellites, the users' back-off;
* :mod:`.shrink` -- a launcher job shrunk in place: the order, the deferred node release and its
  timing, and the nodes of lost workers given back;
* :mod:`.launcher` -- a launcher job's order channel: its workers, its batch, a rebatch, a withdrawal;
* :mod:`.satellite_upkeep` -- satellites after their grow: ended, cancelled, orphans;
* :mod:`.leases` -- while the daemon runs, it alone starts elastic jobs;
* :mod:`.journal` -- the actions a previous daemon left unfinished, settled;
* :mod:`.context` -- the means every part shares (runner, store, clock).

An import-linter contract keeps this package from reading the cluster any other way than
through its port's input (no record source, no view, no observing module but the observation).
"""
