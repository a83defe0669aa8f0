"""Satellite allocations: how a running launcher job grows on Slurm, and how it shrinks by worker.

Slurm cannot add GPUs to a running job (docs/slurm-acting.md). To grow one, the daemon submits a
*satellite*: a separate job, as the job's user, charged to the same account and partition, on the
new GPUs of one node, running the job's own join script (``<secret>.join``, written at submit by
``slurm-elastic submit``) with the new worker ids; those workers join the running job in place
at a step boundary once the daemon's signed order names them. One satellite per node, so every
allocation the daemon may later release is a whole (allocation, node) pair.

A satellite runs with the job's environment and working directory, nothing of the daemon's:
``slurm-elastic submit`` saved the environment the job was submitted with as ``<secret>.env``
(NUL-separated ``NAME=value``, the format of ``sbatch --export-file``), and the satellite is
submitted as::

    setpriv --reuid=UID --regid=GID --init-groups --reset-env --     (as_user: only for another user)
    env -i --chdir=WORK_DIR PATH=<sbatch's folder> SLURM_CONF=<the daemon's, if set>
    sbatch --parsable --export-file=/proc/self/fd/E --chdir=WORK_DIR --job-name=<secret>.join ...
           /proc/self/fd/S JOB W...

``setpriv`` (no PAM, unlike ``runuser``) becomes the user, so sbatch runs with the user's rights,
never root's; ``env -i`` gives sbatch an empty environment but for the Slurm client settings
(:data:`CLIENT_SETTINGS`), so no ``SBATCH_*`` or other variable of the daemon can change what
sbatch does (the daemon's ``SBATCH_EXPORT=NONE`` would drop the whole file); and ``--chdir`` runs
sbatch and the satellite in the job's working directory (sbatch takes ``SLURM_SUBMIT_DIR`` from its
own). With ``--export-file`` Slurm 22.05 clears sbatch's own environment before it builds the job's
(docs/slurm-acting.md). A job without an ``.env`` file (submitted by an older slurm-elastic) is not
grown in place: its satellite could only run in the daemon's environment.

No path of the user's reaches sbatch (issue 37, item 2): the daemon reads the join script and the
environment file once each, through the descriptor it checked (:func:`read_env_file`,
:meth:`~slurm_elastic.channel.Channel.read_join_script`: a regular file of the user's, not writable
by others, at most 4 MiB), copies the bytes into sealed memory files
(:func:`~slurm_elastic.slurm.runner.sealed_copy`) and passes their descriptors ``S`` and ``E`` to
sbatch, which opens ``/proc/self/fd/S`` as its script (sbatch reads a script only by ``open(2)`` of
its first argument) and ``/proc/self/fd/E`` as its environment (``--export-file`` reads a file, or a
descriptor given as a number; the path form fails cleanly where the descriptor is missing instead
of opening a file of that number in the user's folder). A FIFO, a link or a bigger file swapped in
after the check is never opened: sbatch reads the bytes that were checked. ``--job-name`` keeps the
name sbatch gave a satellite from the script's path. sbatch still runs as the user (they may stop
it): the actuator bounds it (:data:`~slurm_elastic.act.grow.USER_COMMAND_TIMEOUT_S`).

This module owns the pure parts of that: naming new workers, the ``sbatch`` argv of a satellite
and the AdminComment that marks it as its job's, reading the job's environment file (checked, capped),
and choosing which workers leave on a shrink (so that only whole (allocation, node) pairs
are freed: Slurm frees GPUs of a node only with the allocation's whole node). Folding satellites
into their job for the planner is observation's (:func:`slurm_elastic.observe.snapshot.fold`). It
runs no command itself.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_elastic.contract import satellite_marker, satellite_token_comment
from slurm_elastic.core.model import NodeName, Placement
from slurm_elastic.core.placement import subset_summing
from slurm_elastic.errors import ElasticError
from slurm_elastic.jobfiles import JobFileError, read
from slurm_elastic.slurm.records import JobRecord

CLIENT_SETTINGS = ("SLURM_CONF",)
"""The variables of the daemon's Slurm command environment a satellite's ``sbatch`` is given: where
the Slurm client finds its cluster. Nothing else of the daemon's environment reaches sbatch, and
with ``--export-file`` sbatch passes none of its own environment to the job."""
ENV_FILE_MAX_BYTES = 4 << 20


class NotExpressible(ElasticError):  # noqa: N818 (an outcome, not a failure of ours)
    """The action cannot be done with what Slurm and the job offer (the message says why)."""


@dataclass(frozen=True, slots=True)
class Satellite:
    """One satellite to submit: ``gpus`` new workers on ``node``.

    Attributes:
        node: the node.
        workers: new worker ids, one per GPU.
    """

    node: str
    workers: tuple[str, ...]


Layout = Mapping[str, tuple[str, str]]  # worker id -> (node, Slurm allocation: the job or a satellite)


def new_satellites(before: Placement, after: Placement, layout: Layout) -> list[Satellite]:
    """The satellites that add ``after``'s extra GPUs, with fresh worker ids (``w<n>`` after the highest).

    Raises:
        NotExpressible: ``after`` drops a GPU of ``before`` (a grow only adds).
    """
    b = dict((n, len(g)) for n, g in before.slots)
    a = dict((n, len(g)) for n, g in after.slots)
    if any(a.get(n, 0) < c for n, c in b.items()):
        raise NotExpressible("a grow that also moves workers needs a shrink first")
    used = [int(m.group(1)) for w in layout if (m := re.fullmatch(r"w(\d+)", w))]
    nxt = max(used, default=-1) + 1
    out = []
    for node in sorted(a):
        extra = a[node] - b.get(node, 0)
        if extra > 0:
            out.append(Satellite(node, tuple(f"w{nxt + i}" for i in range(extra))))
            nxt += extra
    return out


def env_file(join_script: Path) -> Path:
    """The job's saved submit environment, beside its join script: ``<secret>.env``."""
    return join_script.with_suffix(".env")


def client_settings(env: Mapping[str, str]) -> list[str]:
    """``NAME=value`` entries a satellite's sbatch needs from ``env``, the environment the daemon's Slurm
    commands run with: ``PATH`` (the folder of the ``sbatch`` found on ``env``'s ``PATH``) and
    :data:`CLIENT_SETTINGS`."""
    sbatch = shutil.which("sbatch", path=env.get("PATH", os.defpath))
    out = [f"PATH={os.path.dirname(sbatch)}"] if sbatch else []
    return out + [f"{key}={env[key]}" for key in CLIENT_SETTINGS if key in env]


def proc_fd(fd: int) -> str:
    """The path by which a command opens its inherited descriptor ``fd``: ``/proc/self/fd/<fd>``."""
    return f"/proc/self/fd/{fd}"


@dataclass(frozen=True, slots=True)
class Inputs:
    """What a satellite's sbatch reads, as descriptors of sealed copies of the checked bytes
    (:func:`~slurm_elastic.slurm.runner.sealed_copy`), never a path of the user's.

    Attributes:
        script: descriptor of the join script's copy.
        env: descriptor of the saved environment's copy.
        name: the satellite's job name: the join script's file name (``<secret>.join``), which
            sbatch gave it when it was handed the path.
    """

    script: int
    env: int
    name: str

    @property
    def fds(self) -> tuple[int, int]:
        """The descriptors sbatch must inherit."""
        return self.script, self.env


def sbatch_argv(parent: JobRecord, sat: Satellite, inputs: Inputs, *, as_user: Sequence[str] = (),
                client: Sequence[str] = (), token: str = "") -> list[str]:
    """``sbatch`` argv of one satellite: the parent's user (via ``as_user``), account, partition,
    environment and join script (``inputs``, opened by sbatch through the descriptors it must
    inherit, :attr:`Inputs.fds`) and working directory; see the module docstring. ``client``:
    the Slurm client settings sbatch keeps (:func:`client_settings`). ``token``: the journaled
    submission token, put in the satellite's comment (:func:`~slurm_elastic.contract.satellite_token_comment`)
    so that it is found in Slurm even if the daemon dies before it learns the satellite's id.

    A satellite whose parent ends is cancelled by the daemon
    (:func:`~slurm_elastic.act.satellite_upkeep.tend_satellites`).

    Raises:
        NotExpressible: the job's working directory is unknown.
    """
    work_dir = parent.work_dir
    if not work_dir.startswith("/") or "\x00" in work_dir:
        raise NotExpressible(f"job {parent.job_id}: its working directory {work_dir[:200]!r} is unknown or not "
                             "absolute, so a satellite cannot run where the job runs: not grown in place")
    argv = [*as_user, "env", "-i", f"--chdir={work_dir}", *client,
            "sbatch", "--parsable", f"--export-file={proc_fd(inputs.env)}", f"--chdir={work_dir}",
            f"--job-name={inputs.name}", "--nodes=1", f"--nodelist={sat.node}",
            f"--ntasks-per-node={len(sat.workers)}", f"--gres=gpu:{len(sat.workers)}"]
    if parent.account:
        argv.append(f"--account={parent.account}")
    if parent.partition:
        argv.append(f"--partition={parent.partition.split(',')[0]}")
    if token:
        argv.append(f"--comment={satellite_token_comment(token)}")
    return [*argv, proc_fd(inputs.script), parent.job_id, *sat.workers]


def read_env_file(parent: JobRecord, path: Path) -> bytes:
    """The bytes of the job's environment file: a regular file of the job's user, writable by nobody
    else, at most :data:`ENV_FILE_MAX_BYTES`, read once through the descriptor that was checked.

    Never parsed: sbatch gets the bytes (a sealed copy), never the path, so a FIFO would not hold
    it and a file swapped or grown after the check is not what it reads; a file others can write
    would let them choose the satellite's environment.

    Raises:
        NotExpressible: the job has no saved environment (an older submission), its user is
            unknown, or the file breaks a rule (a link, not a regular file, another owner,
            writable by others, too large).
    """
    if not os.path.lexists(path):
        raise NotExpressible(f"job {parent.job_id}: no saved environment {path} (submitted by an older "
                             "slurm-elastic): its satellites would run in the daemon's environment, so it is not "
                             "grown in place; resubmit it with `slurm-elastic submit`")
    try:
        uid = pwd.getpwnam(parent.user).pw_uid
        return read(path, uid, forbidden=0o022, rule="must not be writable by group or others",
                    max_size=ENV_FILE_MAX_BYTES)
    except (KeyError, ValueError):
        raise NotExpressible(f"job {parent.job_id}: unknown user {parent.user!r}") from None
    except JobFileError as exc:
        raise NotExpressible(f"job {parent.job_id}: {exc} (its satellites run with this environment): "
                             "not grown in place") from None


def mark_argv(sat_id: str, parent: str) -> list[str]:
    """``scontrol`` argv that records, where users cannot forge it, whose satellite a job is.

    The AdminComment ``slurm-elastic satellite-of=<job>`` is what the allocation report joins on
    (a satellite's GPU-hours are its job's).
    """
    return ["scontrol", "update", f"JobId={sat_id}", f"AdminComment={satellite_marker(parent)}"]


def as_user(user: str, me: str, *, reset_env: bool = True) -> list[str]:
    """The prefix that runs a command as ``user``, in a fresh environment, or nothing if we are them.

    ``setpriv`` (root, or ``CAP_SETUID``/``CAP_SETGID``) switches to the user's uid, primary group
    and groups, without PAM (``runuser`` opens a PAM session: more privileges and modules than a
    ``sbatch`` needs) and with the environment reset to the user's basics (``--reset-env``).
    :func:`sbatch_argv` then clears the environment in every case, ours included. ``reset_env``
    false keeps the environment the command is given (a replacement's srun passes its environment
    to the step: :mod:`slurm_elastic.slurm.replacements`).

    Raises:
        NotExpressible: ``user`` is unknown on this host.
    """
    if user == me:
        return []
    try:
        pw = pwd.getpwnam(user)
    except (KeyError, ValueError):
        raise NotExpressible(f"user {user!r} is unknown on this host: cannot run a command as them") from None
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups",
            *(["--reset-env"] if reset_env else []), "--"]


@dataclass(frozen=True, slots=True)
class Leave:
    """Who leaves on a shrink and what Slurm then frees.

    Attributes:
        workers: worker ids ordered out.
        parent_nodes: the parent allocation's nodes it keeps (its node list after the shrink).
        satellites: satellite allocations whose every worker leaves (they end by themselves).
    """

    workers: tuple[str, ...]
    parent_nodes: tuple[str, ...]
    satellites: tuple[str, ...]


def leaving(parent: JobRecord, current: Sequence[str], layout: Layout, before: Placement, after: Placement) -> Leave:
    """Choose the workers that leave so that only whole (allocation, node) blocks are freed.

    Slurm frees a job's GPUs on a node only with the whole node, never the batch host, and a
    satellite only whole. The planned placement is followed when its per-node removals are whole
    blocks; otherwise blocks totalling the planned number of GPUs are chosen (satellites first,
    then the job's own nodes, last first): the next observation shows the job where it really is.

    Raises:
        NotExpressible: no set of blocks frees exactly the planned number of GPUs (the message
            names the blocks), or a worker of the current world has no known node.
    """
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)  # (node, alloc) -> workers
    for w in current:
        if w not in layout:
            raise NotExpressible(f"job {parent.job_id}: worker {w} has no known node")
        groups[layout[w]].append(w)
    movable = sorted((key for key in groups if key != (parent.batch_host, parent.job_id)),
                     key=lambda key: (key[1] == parent.job_id, [-ord(c) for c in key[0]], key[1]))
    b = dict((n, len(g)) for n, g in before.slots)
    a = dict((n, len(g)) for n, g in after.slots)
    wanted = {n: b[n] - a.get(n, 0) for n in b if b[n] > a.get(n, 0)}
    chosen = _per_node(movable, groups, wanted) or _by_count(movable, groups, sum(wanted.values()))
    if chosen is None:
        sizes = ", ".join(f"{alloc}@{node}: {len(groups[(node, alloc)])}" for node, alloc in movable) or "none"
        raise NotExpressible(f"job {parent.job_id}: no whole blocks free exactly {sum(wanted.values())} GPU(s) "
                             f"(blocks Slurm can free: {sizes}; never the batch host)")
    out = [w for key in chosen for w in groups[key]]
    freed = set(chosen)
    kept_parent = tuple(sorted(n for n, alloc in groups if alloc == parent.job_id and (n, alloc) not in freed))
    ended = tuple(sorted({alloc for n, alloc in freed if alloc != parent.job_id}
                         - {alloc for key in groups if key not in freed for alloc in (key[1],)}))
    return Leave(tuple(out), kept_parent, ended)


Block = tuple[str, str]


def _per_node(movable: list[Block], groups: Mapping[Block, list[str]],
              wanted: Mapping[NodeName, int]) -> list[Block] | None:
    """Blocks that free exactly the planned GPUs on each node, if such blocks exist."""
    out: list[Block] = []
    for node, free in sorted(wanted.items()):
        here = [key for key in movable if key[0] == node]
        pick = _by_count(here, groups, free)
        if pick is None:
            return None
        out += pick
    return out


def _by_count(blocks: list[Block], groups: Mapping[Block, list[str]], free: int) -> list[Block] | None:
    """Blocks (preferring earlier ones) whose GPUs sum to exactly ``free``."""
    return subset_summing(blocks, lambda key: len(groups[key]), free)
