"""Satellites after their grow: recorded when they end, cancelled when their job no longer needs them.

This module owns what becomes of a satellite allocation (:mod:`slurm_elastic.act.grow` submits
them) at every poll (:func:`tend_satellites`):

* one gone from the queue is recorded as ended, and its workers are taken out of its running
  job's order if it still names them (a satellite that started and then failed);
* one whose job is gone or not running is cancelled, unless that job's training ended less than
  :data:`SATELLITE_END_GRACE_S` ago and the satellite's workers had joined it (they are exiting
  with the job's, and a satellite that ends by itself stays COMPLETED in the accounting; joiners
  that had not joined wait for a job that is gone, and are cancelled with it);
* one still waiting after :data:`SATELLITE_START_TIMEOUT_S` is cancelled and its workers are taken
  out of its job's world by a new order (the latest order wins);
* a job in Slurm carrying the token of a satellite this daemon submitted, but not recorded as one
  (the daemon died before it learnt the id, and no unfinished action claims it), is an orphan:
  cancelled (:func:`cancel_orphans`).
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_elastic.act.context import Hands
from slurm_elastic.act.launcher import withdraw_satellite
from slurm_elastic.contract import satellite_token
from slurm_elastic.core.model import JobState
from slurm_elastic.errors import ElasticError
from slurm_elastic.slurm.records import JobRecord
from slurm_elastic.store import ProgressRow, Store

SATELLITE_START_TIMEOUT_S = 120.0
"""How long a satellite may wait to start before it is cancelled and its workers withdrawn."""
SATELLITE_END_GRACE_S = 30.0
"""How long a running satellite may outlive its job whose last report says training ended: its
workers are exiting with the job's, and a satellite that ends by itself stays COMPLETED in the
accounting. Counted from that end report, by the daemon's clock: one dated ahead gets none. Only
a satellite whose workers had joined the job gets it (:func:`joined`): joiners still starting when
the training ended wait for a job that is gone, and are cancelled with it."""


def tend_satellites(hands: Hands, records: Mapping[str, JobRecord], finished: frozenset[str],
                    now: float) -> list[str]:
    """Settle the recorded satellites by what ``records`` show (module docstring); one line per change."""
    store = hands.store
    lines = []
    submitted = store.satellite_times()
    for sat_id, parent in store.satellites().items():
        sat, job = records.get(sat_id), records.get(parent)
        if sat is None or sat.state is JobState.FINISHED:
            store.end_satellite(sat_id, now)
            withdrawn = ""
            if job is not None and parent not in finished:
                what = withdraw_satellite(hands, job, sat_id)
                withdrawn = f" ({what})" if what == "its workers withdrawn" else ""
            lines.append(f"satellite {sat_id} of job {parent} ended{withdrawn}")
        elif job is None or job.state is not JobState.RUNNING:
            exiting = _exiting(store, parent, now) if sat.state is JobState.RUNNING else None
            if exiting is not None and joined(store, parent, submitted.get(sat_id, now), exiting):
                continue
            hands.cancel(sat_id)
            lines.append(f"satellite {sat_id} cancelled: job {parent} is not running"
                         + (" (its workers had not joined it when its training ended)" if exiting else ""))
        elif sat.state is JobState.PENDING and now - submitted.get(sat_id, now) > SATELLITE_START_TIMEOUT_S:
            hands.cancel(sat_id)
            lines.append(f"satellite {sat_id} of job {parent} did not start in "
                         f"{SATELLITE_START_TIMEOUT_S:.0f} s: cancelled, " + withdraw_satellite(hands, job, sat_id))
    return lines


def _exiting(store: Store, job_id: str, now: float) -> ProgressRow | None:
    """The job's end report if its training ended within the satellite end grace, else ``None``."""
    last = store.latest_progress(job_id)
    ok = last is not None and last.kind == "end" and 0.0 <= now - last.t < SATELLITE_END_GRACE_S
    return last if ok else None


def joined(store: Store, job_id: str, submitted: float, end: ProgressRow) -> bool:
    """Whether a satellite submitted at ``submitted`` had its workers in the job's world: a report
    of the job since then names a larger world than its last report before (the joiners joined).

    Only such a satellite's workers exit with the job's. Joiners that had not joined when the
    training ended (a grow ordered seconds before the end: they were still starting) wait to
    join a job that is gone and do not end by themselves; the end grace kept such a satellite
    30 s past its job (seen in ``bench chaos``: its GPUs held, then cancelled all the same).
    """
    rows = [r for r in store.progress_of(job_id) if r.t <= end.t]
    before = next((r.world for r in reversed(rows) if r.t < submitted and r.kind in ("progress", "resize")), 0)
    return any(r.world > before for r in rows if r.t >= submitted and r.kind in ("progress", "resize", "end"))


def cancel_orphans(hands: Hands, records: Mapping[str, JobRecord]) -> list[str]:
    """Cancel the jobs carrying a satellite token this daemon journaled, unknown as satellites."""
    store = hands.store
    marked = {rec.job_id: token for rec in records.values()
              if rec.state is not JobState.FINISHED and (token := satellite_token(rec.comment))}
    known = store.satellites(include_ended=True)
    suspects = {jid: token for jid, token in marked.items() if jid not in known}
    if not suspects:
        return []
    claimed = {str(s["token"]) for e in store.unfinished_actions()
               for n, d, _ in store.steps_of(e.id) if n == "order" for s in d.get("satellites", [])}
    ours = {str(d["token"]) for d in store.step_details("sbatch")}
    lines = []
    for jid, token in sorted(suspects.items()):
        if token in ours and token not in claimed:
            try:
                hands.runner(["scancel", jid])
                lines.append(f"orphan satellite {jid} (submitted, its id never journaled) cancelled")
            except ElasticError as exc:
                lines.append(f"orphan satellite {jid}: scancel failed: {exc}")
    return lines
