"""The trust guard: what a job reports moves GPUs within fair shares only, and never stops another job.

A job's reports (its throughput, batch, samples, the epochs it trains, model name, measured step
times) are signed by its owner, so they are the owner's word. :mod:`slurm_elastic.observe.bounds`
refuses what no job can have done; within those bounds a report still changes what a planner sees,
and a planner that trusts it may take from other jobs. This module owns :class:`ReportGuard`, a
:class:`~slurm_elastic.core.planner.Planner` wrapped around every policy, which bounds that:

* the **prior plan** is what the policy plans when every job is seen as it would be had it never
  reported (``Job.prior``, built by the observer from Slurm's record and the profiles alone);
* a job's **fair share** is its part of the schedulable GPUs, split equally among the active elastic
  jobs and water-filled up to each job's maximum (:func:`fair_shares`), at least its minimum;
* the guarded plan gives each job a GPU count between its prior count and its fair share (either
  order), so reports move GPUs between jobs only within that band: no job loses to another's
  reports more than it holds beyond its fair share, and no job gains from its own reports more
  than its fair share (a job that reported nothing keeps what the policy gives it above the band:
  what it gains, it gains from the others' reports). GPUs a capped job's gain had taken go back to
  the jobs the prior plan gave them to, so the guard leaves no GPU idle that the prior plan uses;
* a running job is stopped only when the prior plan stops it too, and a running job without the
  launcher (``Job.can_rebatch`` false: Slurm resizes or moves it by requeueing it) keeps its GPUs
  unless the prior plan resizes it too. A waiting job the prior plan starts is started.

Where the policy's plan keeps these rules it is returned unchanged. Otherwise its counts are moved
into the band (those that gained most over the prior plan give back first, when the band overbooks
the cluster), and the plan is rebuilt from them with the shared ``build_plan``; if that cannot be
placed, the prior plan's counts are. A snapshot in which no job has a ``prior`` (the simulator's
virtual cluster, whose measurements are its own truth; tests) is planned exactly as without the
guard, with one planner call. Otherwise the guard costs a second call of the policy per round.

Pure: the prior plan draws from a copy of the round's generator, so the policy's own plan is the
one it makes without the guard, and its memo is the one kept.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import numpy as np

from slurm_elastic.core import sizing
from slurm_elastic.core.model import ClusterSnapshot, Job, JobId, JobState, Plan
from slurm_elastic.core.planner import PlannerWrapper, PlanResult, build_plan
from slurm_elastic.errors import InvalidPlanError, SnapshotError

REPORTED_FIELDS = ("model", "model_points", "max_local_batch", "min_batch", "max_batch", "base_batch",
                   "base_lr", "local_batch", "epoch_size", "samples_processed", "target_epochs",
                   "observed_throughput", "run_time", "last_change_time", "samples_at_last_change", "progress")
"""The fields of a :class:`~slurm_elastic.core.model.Job` a job's own reports may set (the observer's
``JobRuntime``); every other field comes from Slurm, the site and the daemon. ``can_grow`` is not
one: a job that reported its end cannot grow, which costs only itself."""


def without_reports(job: Job) -> Job:
    """``job`` as it would be had it never reported (itself when nothing of it came from reports).

    The fields a report sets are taken from ``job.prior``; the others (GPU range, state, placement,
    and what a guard changed in a view) stay ``job``'s.
    """
    prior = job.prior
    if prior is None:
        return job
    return replace(job, prior=None, **{name: getattr(prior, name) for name in REPORTED_FIELDS})


def fair_shares(snapshot: ClusterSnapshot) -> dict[JobId, int]:
    """Each active elastic job's fair share of the schedulable GPUs, at least its minimum.

    The GPUs are split equally among the jobs, water-filled: a job whose maximum is below an equal
    part takes its maximum, and what it leaves is split among the others (whole GPUs; what a
    division leaves over goes to the earlier submitted). A share below the job's minimum is raised
    to it.
    """
    jobs = sorted(snapshot.elastic_jobs(), key=lambda j: (j.max_gpus, -j.submit_time, j.job_id))
    left, out = len(snapshot.schedulable_gpus()), {}
    for n, job in enumerate(jobs):
        share = min(job.max_gpus, left // (len(jobs) - n))
        left -= share
        out[job.job_id] = min(job.max_gpus, max(job.min_gpus, share))
    return out


class ReportGuard(PlannerWrapper):
    """Wraps a policy so that reports cannot cost other jobs (see the module docstring)."""

    def plan(self, snapshot: ClusterSnapshot, memo: Any, rng: np.random.Generator) -> PlanResult:
        """The inner planner's plan, kept within the band of the prior plan and the fair shares."""
        if not any(j.prior is not None for j in snapshot.jobs):
            return self.inner.plan(snapshot, memo, rng)
        prior_rng = copy.deepcopy(rng)
        result = self.inner.plan(snapshot, memo, rng)
        prior_view = replace(snapshot, jobs=tuple(without_reports(j) for j in snapshot.jobs))
        base = self.inner.plan(prior_view, memo, prior_rng).plan
        counts = {p.job_id: p.num_gpus for p in result.plan.jobs}
        base_counts = {p.job_id: p.num_gpus for p in base.jobs}
        kept, notes = self._within_band(snapshot, counts, base, base_counts)
        if kept == counts and not self._moves_a_pinned_job(snapshot, result.plan, base):
            return result
        plan = self._rebuild(snapshot, result.plan, kept, notes)
        if plan is None:
            plan = self._rebuild(snapshot, result.plan, base_counts,
                                 ("the plan within the reports' band could not be placed: planned from priors",))
        return PlanResult(plan if plan is not None else base, result.memo)

    @staticmethod
    def _within_band(snapshot: ClusterSnapshot, counts: dict[JobId, int], base: Plan,
                     base_counts: dict[JobId, int]) -> tuple[dict[JobId, int], tuple[str, ...]]:
        """``counts`` moved into each job's band, and one note per job moved."""
        fair = fair_shares(snapshot)
        base_by_job = base.by_job()
        lo: dict[JobId, int] = {}
        hi: dict[JobId, int] = {}
        for job in snapshot.elastic_jobs():
            jid, c0 = job.job_id, base_counts.get(job.job_id, 0)
            prior_keeps = (c0 == job.num_gpus and jid in base_by_job
                           and base_by_job[jid].placement.gpu_set() == job.placement.gpu_set())
            if job.state is JobState.RUNNING and not job.can_rebatch and prior_keeps:
                lo[jid] = hi[jid] = job.num_gpus  # a resize or a move would requeue it
            else:
                lo[jid], hi[jid] = min(c0, fair[jid]), max(c0, fair[jid])
                if job.prior is None:  # it reported nothing: what it gains, it gains from others' reports
                    hi[jid] = max(hi[jid], counts.get(jid, 0))
        kept = {jid: min(hi[jid], max(lo[jid], counts.get(jid, 0))) for jid in lo}
        over = sum(kept.values()) - len(snapshot.schedulable_gpus())
        by_gain = sorted(snapshot.elastic_jobs(), key=lambda j: (base_counts.get(j.job_id, 0) - kept[j.job_id],
                                                                 -j.submit_time, j.job_id))
        for job in by_gain:
            if over <= 0:
                break
            jid, k = job.job_id, kept[job.job_id]
            new = max(lo[jid], k - over)
            if 0 < new < job.min_gpus:
                new = job.min_gpus if lo[jid] else 0
            over -= k - new
            kept[jid] = new
        # GPUs a capped job's gain had taken go back to the jobs the prior plan gave them to
        free = -over if over < 0 else 0
        short = sorted((j for j in snapshot.elastic_jobs() if kept[j.job_id] < min(base_counts.get(j.job_id, 0),
                                                                                     hi[j.job_id])),
                       key=lambda j: (kept[j.job_id] - base_counts.get(j.job_id, 0), j.submit_time, j.job_id))
        for job in short:
            jid, k = job.job_id, kept[job.job_id]
            if job.state is JobState.RUNNING and not job.can_rebatch:
                continue  # a resize would requeue it
            add = min(free, min(base_counts.get(jid, 0), hi[jid]) - k)
            if add <= 0 or k + add < job.min_gpus:
                continue
            kept[jid], free = k + add, free - add
        notes = tuple(f"job {jid} given {k} GPUs, not {counts.get(jid, 0)}: what jobs report moves GPUs only "
                      f"between the plan from priors ({base_counts.get(jid, 0)}) and the fair share ({fair[jid]})"
                      for jid, k in sorted(kept.items()) if k != counts.get(jid, 0))
        return {jid: k for jid, k in kept.items() if k}, notes

    @staticmethod
    def _moves_a_pinned_job(snapshot: ClusterSnapshot, plan: Plan, base: Plan) -> bool:
        """Whether ``plan`` moves a running job without the launcher (a requeue) that ``base`` keeps
        where it is (its size alone is kept by the band)."""
        planned, kept = plan.by_job(), base.by_job()
        for job in snapshot.elastic_jobs():
            if job.state is not JobState.RUNNING or job.can_rebatch:
                continue
            here = job.placement.gpu_set()
            p, b = planned.get(job.job_id), kept.get(job.job_id)
            if p is not None and b is not None and b.placement.gpu_set() == here != p.placement.gpu_set():
                return True
        return False

    @staticmethod
    def _rebuild(snapshot: ClusterSnapshot, plan: Plan, counts: dict[JobId, int],
                 notes: tuple[str, ...]) -> Plan | None:
        before = plan.by_job()
        jobs = {j.job_id: j for j in snapshot.jobs}

        def choose(job: Job, k: int) -> sizing.Sizing | None:
            old = before.get(job.job_id)
            if old is not None and old.num_gpus == k:
                return sizing.Sizing(old.global_batch, old.local_batch, old.accumulation, old.lr)
            if job.state is JobState.RUNNING and k == job.num_gpus:
                return sizing.kept(jobs[job.job_id])
            return sizing.size_for(job, k, snapshot.profiles[job.model])

        reasons = {u.job_id: u.reason for u in plan.unplaced}
        try:
            return build_plan(snapshot, plan.policy, counts, reasons=reasons, choose=choose, score=plan.score,
                              notes=(*plan.notes, *notes))
        except (InvalidPlanError, SnapshotError, ValueError):
            return None
