"""Slurm's records (nodes, jobs, accounting) as typed values, whichever source read them.

This module owns :class:`NodeRecord`, :class:`GpuRequest`, :class:`JobRecord` and
:class:`AccountingRecord`, and two facts read off a job's record: the workers a launcher job starts
with (:func:`initial_workers`) and when its current run started (:func:`run_start_of`). Reading
them from Slurm's ``--json`` documents is :mod:`slurm_elastic.slurm.json_records`'; from pyslurm,
:mod:`slurm_elastic.slurm.pyslurm_records`'; turning records into a snapshot is
:mod:`slurm_elastic.observe`'. It reads nothing, runs no command, reads no clock and does not log.

Job ids (:attr:`JobRecord.job_id`) are the ids ``squeue`` prints and ``scontrol`` accepts:

* a plain job: ``"123"``;
* an array task: ``"<array_job_id>_<array_task_id>"`` (e.g. ``"100_7"``); a pending array record
  not yet split into tasks: ``"<array_job_id>_[<array_task_string>]"`` (e.g. ``"100_[3-9]"``);
* a heterogeneous-job component: ``"<het_job_id>+<het_job_offset>"`` (e.g. ``"200+1"``).

The numeric Slurm id of the record is kept in :attr:`JobRecord.slurm_job_id`.

"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_elastic.core.model import JobId, JobState, NodeName, NodeState, Placement


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """One node as Slurm reports it.

    Attributes:
        name: Slurm node name.
        state: reduced scheduling state (:func:`~slurm_elastic.slurm.dialects.map_node_state`).
        slurm_state: base state then flags as Slurm printed them, upper case (``("MIXED", "DRAIN")``).
        gpus: GPUs configured (sum of the ``gpu`` entries of ``gres``).
        gpu_types: GPU types named in ``gres`` (``("v100",)``; empty when untyped).
        used_gpus: indices of GPUs allocated to jobs, from ``gres_used`` ``IDX:`` lists, sorted.
        partitions: partitions the node belongs to, sorted.
        reason: the drain/down reason (``""`` if none).
    """

    name: NodeName
    state: NodeState
    slurm_state: tuple[str, ...]
    gpus: int
    gpu_types: tuple[str, ...]
    used_gpus: tuple[int, ...]
    partitions: tuple[str, ...]
    reason: str = ""

    @property
    def free_gpus(self) -> tuple[int, ...]:
        """GPU indices no job holds according to ``gres_used``."""
        used = set(self.used_gpus)
        return tuple(g for g in range(self.gpus) if g not in used)


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """The GPUs a job asked for (``--gres``/``--gpus-per-node``, ``--gpus``, ``--gpus-per-task``).

    Attributes:
        per_node: from ``tres_per_node`` (``None`` if no GPU is asked per node).
        per_job: from ``tres_per_job``.
        per_task: from ``tres_per_task``.
        gpu_type: GPU type named in the request (``"v100"``), ``""`` if none.
    """

    per_node: int | None = None
    per_job: int | None = None
    per_task: int | None = None
    gpu_type: str = ""

    def total(self, node_count: int, tasks: int | None) -> int:
        """GPUs of the whole request: per job, else per node x nodes, else per task x tasks, else 0."""
        if self.per_job is not None:
            return self.per_job
        if self.per_node is not None:
            return self.per_node * max(1, node_count)
        if self.per_task is not None:
            return self.per_task * max(1, tasks or 1)
        return 0


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job as ``squeue --json`` (or ``scontrol show job --json``) reports it.

    Attributes:
        job_id: display id (plain, ``array_task`` or ``het+offset``; see the module docstring).
        slurm_job_id: the record's numeric Slurm job id.
        name: job name.
        user: owner's user name.
        account: account charged.
        partition: partition (comma list while pending on several).
        state: reduced life-cycle state (:func:`~slurm_elastic.slurm.dialects.map_job_state`).
        slurm_state: base state then flags, as printed (22.05: the one word printed).
        submit_time: seconds since the epoch, ``None`` if unset.
        start_time: seconds since the epoch, ``None`` if unset (for pending jobs Slurm reports the
            *expected* start here).
        resize_time: when the allocation last changed size, ``None`` if never.
        nodes: allocated nodes, hostlist expanded, in Slurm's node order.
        node_count: nodes allocated (or requested while pending).
        tasks: tasks requested, ``None`` if unset.
        gpus: per allocated node, the GPU indices held (from ``gres_detail``, node order).
        gpu_request: what the job asked for.
        admin_comment: AdminComment (``""`` if unset).
        comment: user comment (``""`` if unset).
        batch_host: node running the batch script, ``None`` if none.
        restart_count: times the job was requeued.
        array_job_id, array_task_id: array ids (``None`` if not an array task).
        het_job_id, het_job_offset: heterogeneous-job ids (``None`` if not a het job).
        work_dir: the job's working directory (``current_working_directory``; ``""`` if unset):
            where its satellites run.
        release_blocks: for a running launcher job, the ``(node, GPUs)`` blocks Slurm can free one
            at a time (a node of its own allocation other than the batch host, a whole one-node
            satellite); ``None`` when any count can go (set by
            :func:`slurm_elastic.observe.snapshot.fold`).
    """

    job_id: JobId
    slurm_job_id: int
    name: str
    user: str
    account: str
    partition: str
    state: JobState
    slurm_state: tuple[str, ...]
    submit_time: int | None
    start_time: int | None
    resize_time: int | None
    nodes: tuple[NodeName, ...]
    node_count: int
    tasks: int | None
    gpus: tuple[tuple[NodeName, tuple[int, ...]], ...]
    gpu_request: GpuRequest
    admin_comment: str
    comment: str
    batch_host: str | None
    restart_count: int = 0
    array_job_id: int | None = None
    array_task_id: int | None = None
    het_job_id: int | None = None
    het_job_offset: int | None = None
    work_dir: str = ""
    release_blocks: tuple[tuple[NodeName, int], ...] | None = None

    @property
    def placement(self) -> Placement:
        """The GPUs held, as a core :class:`Placement`."""
        return Placement.of((n, g) for n, gs in self.gpus for g in gs)

    @property
    def allocated_gpus(self) -> int:
        """GPUs held now (0 unless running)."""
        return sum(len(gs) for _, gs in self.gpus)

    @property
    def requested_gpus(self) -> int:
        """GPUs of the request (see :meth:`GpuRequest.total`)."""
        return self.gpu_request.total(self.node_count, self.tasks)


@dataclass(frozen=True, slots=True)
class AccountingRecord:
    """One job as ``sacct --json`` reports it.

    Attributes:
        job_id: display id, as for :class:`JobRecord`.
        slurm_job_id: numeric Slurm job id.
        name: job name.
        user, account, partition: as in Slurm.
        state: reduced state.
        slurm_state: state as printed (``state.current``).
        submit_time, start_time, end_time: seconds since the epoch, ``None`` if unset (0).
        elapsed: seconds the job ran (``time.elapsed``).
        allocated_gpus: ``tres.allocated`` entry of type ``gres`` named ``gpu`` (0 if absent).
        nodes: nodes, hostlist expanded (empty if none).
        admin_comment: ``comment.administrator`` (``""`` if unset).
        steps: its steps that ran the job's work (``srun``: not ``batch``, ``extern`` or
            ``interactive``), each ``(start, end)`` in seconds since the epoch, ``None`` if unset;
            read where ``sacct`` lists them (its ``--json`` does, ``-X`` or not).
    """

    job_id: JobId
    slurm_job_id: int
    name: str
    user: str
    account: str
    partition: str
    state: JobState
    slurm_state: tuple[str, ...]
    submit_time: int | None
    start_time: int | None
    end_time: int | None
    elapsed: int
    allocated_gpus: int
    nodes: tuple[NodeName, ...]
    admin_comment: str
    steps: tuple[tuple[int | None, int | None], ...] = ()



def initial_workers(record: JobRecord) -> list[tuple[str, str, str]]:
    """The workers a launcher job starts with: ``w<i>`` for task i, block-distributed over its nodes.

    One task per GPU (the template's ``--ntasks-per-node`` equals its GPUs per node), so node j of
    the allocation runs the next ``len(gpus on j)`` task ids. Returns ``(worker, node, alloc)``.
    """
    out: list[tuple[str, str, str]] = []
    i = 0
    for node, gpus in record.gpus:
        for _ in gpus:
            out.append((f"w{i}", node, record.job_id))
            i += 1
    return out


def run_start_of(rec: JobRecord) -> float | None:
    """When Slurm started the job's current run, if it was requeued (``None``: its first run). What
    an earlier run reported (its end, the workers it lost) or was owed is that run's: the requeue
    ended its workers and started them again."""
    return float(rec.start_time) if rec.restart_count > 0 and rec.start_time else None
