"""Replacing a lost worker in place: which GPU it left idle, its new id, and the ``srun`` that starts it.

A worker lost on a node that keeps others (the batch host, a node with other workers of the job, a
satellite with other workers) leaves its GPU idle until its allocation ends: Slurm frees a job's
GPUs only with a whole node, a satellite's only whole. The daemon starts a worker again on that
GPU, under a new id, as a one-task step of the allocation that holds it (checked on Slurm 22.05
with the dev cluster)::

    [setpriv --reuid=UID --regid=GID --init-groups --]      (only for another user; no --reset-env)
    srun --jobid=ALLOC --overlap --nodelist=NODE --nodes=1 --ntasks=1 --gres=gpu:N
         --kill-on-bad-exit=0 --job-name=slurm-elastic-replace-W --chdir=WORK_DIR
         bash -c <the job's join script> slurm-elastic-replace --replace SLOT JOB W

``--overlap`` is what lets the step start while the job's first step still holds every GPU (the
lost task's GPU is not freed before that step ends). Such a step with ``--gres=gpu:1`` is given the
node's first GPU of the allocation, which a live worker holds; with ``--gres=gpu:N`` (the N GPUs
the allocation holds on the node) it sees all N, in the order the first step saw them, and the
join script tells the worker the lost worker's *slot* (``SLURM_ELASTIC_SLOT``), which
``slurm_elastic_launcher.gpu_binding`` takes instead of its ``SLURM_LOCALID`` (0). ``--gpu-bind``
is not used: with ``task/none`` it binds nothing on 22.05, and its ``map_gpu`` ids are global or
job-relative depending on the site's cgroup settings.

A worker's slot is its position among the first workers of its (node, allocation) block, in id
order (the job's first step is block-distributed, one task per GPU, and a satellite's workers are
its tasks in order); a replacement inherits the slot of the worker it replaced (:func:`slot_of`).

The step runs as the job's user, with the environment the job was submitted with (its ``.env``,
:func:`step_env`: entries that are not ``NAME=value``, and the variables Slurm's clients read as
options, are dropped) and the daemon's Slurm client settings; srun is given no shell string: the
join script's checked bytes are one argv element. This module is pure: it plans and builds argv,
the acting step (:mod:`slurm_elastic.act.replace`) runs them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from slurm_elastic.slurm.satellites import Layout, NotExpressible, as_user

JOIN_MARKER = b"SLURM_ELASTIC_SLOT"
"""What a join script that can start a replacement worker (``--replace SLOT``) contains: one rendered
by an older ``slurm-elastic submit`` cannot, and its job's lost workers are not replaced."""
STEP_NAME_PREFIX = "slurm-elastic-replace-"
"""The step's name: this prefix and the new worker's id."""
SCRIPT_NAME = "slurm-elastic-replace"
"""``$0`` of the join script run by ``bash -c``."""
CLIENT_PREFIXES = ("SLURM_", "SRUN_", "SALLOC_", "SBATCH_", "SPANK_")
"""Variables of the job's saved environment that are not passed to srun: Slurm's clients read them as
options (``SLURM_OVERLAP``, ``SRUN_CPUS_PER_TASK``, ``SLURM_EXPORT_ENV``...), and the step's own are set
by Slurm. The launcher's own (:data:`LAUNCHER_PREFIX`) are kept."""
LAUNCHER_PREFIX = "SLURM_ELASTIC_"
"""The launcher's variables (``SLURM_ELASTIC_EVENT_LOG``...): the job's workers had them, so the new one does."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")
_WORKER = re.compile(r"w(\d{1,9})")


@dataclass(frozen=True, slots=True)
class Replacement:
    """One worker to start again.

    Attributes:
        worker: the new worker's id (never the lost one's: ``w<n>`` after the highest known).
        lost: the lost worker it takes the place of.
        node: the node of the idle GPU.
        alloc: the Slurm allocation that holds it (the job, or one of its satellites).
        slot: the lost worker's slot on the node (:func:`slot_of`).
        gpus: the GPUs ``alloc`` holds on ``node`` (the step's ``--gres=gpu:N``).
    """

    worker: str
    lost: str
    node: str
    alloc: str
    slot: int
    gpus: int

    def detail(self) -> dict[str, object]:
        """The journal's form."""
        return {"worker": self.worker, "lost": self.lost, "node": self.node, "alloc": self.alloc,
                "slot": self.slot, "gpus": self.gpus}


def _number(worker: str) -> int:
    m = _WORKER.fullmatch(worker)
    return int(m.group(1)) if m else -1


def slot_of(worker: str, layout: Layout, replaced: Mapping[str, str]) -> int:
    """``worker``'s slot on its node: its position among the first workers of its (node, allocation)
    block in id order, or, for a replacement (``replaced``: new id -> the worker it replaced), the
    slot of the worker it replaced.

    Raises:
        NotExpressible: the worker, or one it replaced, has no known node.
    """
    seen: set[str] = set()
    while worker in replaced:
        if worker in seen:
            raise NotExpressible(f"worker {worker}: its replacements form a loop")
        seen.add(worker)
        worker = replaced[worker]
    if worker not in layout:
        raise NotExpressible(f"worker {worker} has no known node")
    block = layout[worker]
    first = sorted((w for w, at in layout.items() if at == block and w not in replaced), key=_number)
    return first.index(worker)


def plan(job_id: str, stay: Sequence[str], gone: Sequence[str], layout: Layout, replaced: Mapping[str, str],
         held: Mapping[str, Mapping[str, int]], freed: Collection[str]) -> list[Replacement]:
    """The replacements of the lost workers ``gone`` of job ``job_id`` whose GPU stays idle.

    A lost worker is replaced when the allocation that ran it still holds its node (``held``:
    allocation -> node -> GPUs it holds there) and the node is not given back (``freed``: nodes of
    the job's own allocation released because all their workers were lost); a satellite's worker
    only while another worker of that satellite stays (a satellite whose workers all went ends).

    Raises:
        NotExpressible: a lost worker has no known node.
    """
    out: list[Replacement] = []
    nxt = max((_number(w) for w in layout), default=-1) + 1
    for w in gone:
        if w not in layout:
            raise NotExpressible(f"job {job_id}: lost worker {w} has no known node")
        node, alloc = layout[w]
        if alloc == job_id and node in freed:
            continue
        if node not in held.get(alloc, {}):
            continue
        if alloc != job_id and not any(layout.get(s) == (node, alloc) for s in stay):
            continue
        out.append(Replacement(f"w{nxt}", w, node, alloc, slot_of(w, layout, replaced), held[alloc][node]))
        nxt += 1
    return out


def step_env(saved: bytes, client: Sequence[str]) -> dict[str, str]:
    """The environment srun runs with: the job's saved submit environment (``NAME=value`` entries,
    NUL-separated, as ``slurm-elastic submit`` wrote it), without the entries that are not
    ``NAME=value`` with a plain name and without :data:`CLIENT_PREFIXES` variables (but the
    launcher's, :data:`LAUNCHER_PREFIX`), then the
    daemon's Slurm client settings (``client``: ``NAME=value``; its ``PATH`` only finds srun, the job's
    ``PATH`` is kept)."""
    env: dict[str, str] = {}
    for raw in saved.split(b"\0"):
        name, eq, value = raw.decode("utf-8", "surrogateescape").partition("=")
        slurm_option = name.startswith(CLIENT_PREFIXES) and not name.startswith(LAUNCHER_PREFIX)
        if eq and _NAME.fullmatch(name) and not slurm_option:
            env[name] = value
    for entry in client:
        name, _, value = entry.partition("=")
        if name != "PATH":
            env[name] = value
    return env


def srun_path(client: Sequence[str]) -> str:
    """The ``srun`` beside the ``sbatch`` the daemon's Slurm client settings found (their ``PATH``).

    Raises:
        NotExpressible: no ``PATH`` among them (no sbatch was found).
    """
    folder = next((e.partition("=")[2] for e in client if e.startswith("PATH=")), "")
    if not folder.startswith("/"):
        raise NotExpressible("no Slurm client folder known (sbatch was not found on the daemon's PATH): srun "
                             "cannot be run")
    return os.path.join(folder, "srun")


def as_user_keeping_env(user: str, me: str) -> list[str]:
    """The prefix that runs a command as ``user`` with the environment it is given (``setpriv``
    without ``--reset-env``: srun passes its environment to the step), or nothing if we are them.

    Raises:
        NotExpressible: ``user`` is unknown on this host.
    """
    return as_user(user, me, reset_env=False)


def srun_argv(job_id: str, r: Replacement, work_dir: str, script: str, *, srun: str = "srun",
              as_user: Sequence[str] = ()) -> list[str]:
    """The argv that starts ``r`` (module docstring): the join script's text ``script`` is one
    element, run by ``bash -c`` with ``--replace SLOT JOB WORKER``.

    Raises:
        NotExpressible: the job's working directory is unknown, or the script has a NUL byte.
    """
    if not work_dir.startswith("/") or "\x00" in work_dir:
        raise NotExpressible(f"job {job_id}: its working directory {work_dir[:200]!r} is unknown or not absolute: "
                             "a worker cannot be started again where the job runs")
    if "\x00" in script:
        raise NotExpressible(f"job {job_id}: its join script has a NUL byte")
    return [*as_user, srun, f"--jobid={r.alloc}", "--overlap", f"--nodelist={r.node}", "--nodes=1", "--ntasks=1",
            f"--gres=gpu:{r.gpus}", "--kill-on-bad-exit=0", f"--job-name={STEP_NAME_PREFIX}{r.worker}",
            f"--chdir={work_dir}", "bash", "-c", script, SCRIPT_NAME, "--replace", str(r.slot), job_id, r.worker]


def journaled_argv(argv: Sequence[str], script: str) -> list[str]:
    """``argv`` as the journal keeps it: the join script's text named, not copied."""
    return ["<join script>" if a == script else a for a in argv]
