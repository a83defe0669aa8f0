"""The rehearsal's verdicts: what the event logs, reports and probe lines of a rehearsal show.

This module owns the checks and what each one means (docs/rehearse.md says the same to users). It
reads files and the driver's :class:`~.driver.RunRecord`; it starts nothing. A check is ``pass``,
``fail`` or ``not checked`` (with why): a check it cannot make is never reported as passed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_elastic.rehearse.driver import ActionRecord, RunRecord, Worker, _read_jsonl

PASS, FAIL, NOT_CHECKED = "pass", "fail", "not checked"


@dataclass(frozen=True, slots=True)
class Verdict:
    """One check's outcome.

    Attributes:
        name: the check, e.g. ``grow 2 -> 3`` or ``samples``.
        status: ``pass``, ``fail`` or ``not checked``.
        detail: one line: what was seen, or why it failed or could not be checked.
        figures: numbers behind it (pauses in seconds, losses), for ``--json``.
    """

    name: str
    status: str
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)


def _events(record: RunRecord) -> dict[str, list[dict[str, Any]]]:
    return {key: _read_jsonl(w.log) for key, w in record.workers.items()}


def _worker(record: RunRecord, run: int, wid: str) -> Worker:
    return record.workers[f"r{run}.{wid}"]


def run_verdict(record: RunRecord) -> Verdict:
    """``run``: every action took effect and the script then trained to its end."""
    if record.failure:
        first = record.failure.splitlines()[0]
        if _never_made_a_world(record):
            first = f"{PORTED_BUT_FAILED if _probed(record, 'dropin') else NOT_PORTED}; {first}"
        return Verdict("run", FAIL, first, {"output": record.failure})
    return Verdict("run", PASS, f"{len(record.actions)} actions, then the script ran to its end "
                   f"({record.wall_s:g} s)", {"wall_s": record.wall_s})


NOT_PORTED = ("the script never made the elastic world (no call of slurm_elastic_launcher.init() or of "
              "slurm_elastic_launcher.ddp's init_process_group): port it first (docs/launcher.md, porting guide)")


PORTED_BUT_FAILED = ("the script imports slurm_elastic_launcher.ddp but stopped before its init_process_group "
                     "made the elastic world: its own code failed first (its output below)")


def _probed(record: RunRecord, ev: str) -> bool:
    """Some worker's probe wrote a line ``ev``."""
    return any(x.get("ev") == ev for w in record.workers.values() for x in _read_jsonl(w.probe))


def _never_made_a_world(record: RunRecord) -> bool:
    """Every worker ran under the probe and none made the elastic world (an unported script)."""
    if not record.probed or not record.workers:
        return False
    lines = [_read_jsonl(w.probe) for w in record.workers.values()]
    ran = all(any(x.get("ev") == "probe" for x in mine) for mine in lines)
    return ran and not any(x.get("ev") == "world" for mine in lines for x in mine)


def action_verdicts(record: RunRecord) -> list[Verdict]:
    """One verdict per action: it happened, in place for a resize, and its pause."""
    ev = _events(record)
    return [_action(record, ev, i, rec) for i, rec in enumerate(record.actions, 1)]


def _action(record: RunRecord, ev: dict[str, list[dict[str, Any]]], i: int, rec: ActionRecord) -> Verdict:
    name = f"{i}. {rec.action.label}"
    if not rec.done:
        return Verdict(name, FAIL, "did not take effect: " + (record.failure.splitlines()[0] if record.failure
                                                              else "the rehearsal stopped before it"))

    def of(wid: str, run: int = rec.run) -> list[dict[str, Any]]:
        return ev.get(f"r{run}.{wid}", [])

    kind, gen = rec.action.kind, rec.gen_after
    world = len(rec.after)
    new_steps = {w: [e for e in of(w, rec.run + (kind == "requeue")) if e["ev"] == "step" and e["gen"] == gen]
                 for w in rec.after}
    wrong = sorted({e["world"] for steps in new_steps.values() for e in steps} - {world})
    if wrong:
        return Verdict(name, FAIL, f"steps in {gen} ran at world sizes {wrong}, not {world}")
    if kind in ("grow", "shrink"):
        stayers = [w for w in rec.before if w in rec.after]
        for w in stayers:
            mine = of(w)
            if not any(e["ev"] == "switch" and e.get("seq") == rec.seq for e in mine):
                return Verdict(name, FAIL, f"{w} never switched to order {rec.seq}")
            first_new = min((e["t"] for e in new_steps.get(w, [])), default=None)
            switched = min(e["t"] for e in mine if e["ev"] == "switch" and e.get("seq") == rec.seq)
            last_old = max((e["t"] for e in mine if e["ev"] == "step" and e["t"] < switched), default=None)
            # Between its last step before the switch and its first after it: a requeued run's worker
            # logged resumed_from at its start, before the steps this resize came after.
            if first_new is None or last_old is None or any(
                    e["ev"] in ("exit", "resumed_from") and last_old < e["t"] < first_new for e in mine):
                return Verdict(name, FAIL, f"{w} did not stay in its process through the resize")
            if not any(e["ev"] == "step" and e["gen"] == rec.gen_before for e in mine):
                return Verdict(name, FAIL, f"{w} logged no step before the resize, in {rec.gen_before}")
        joiners = [w for w in rec.after if w not in rec.before]
        for w in joiners:
            formed = [e for e in of(w) if e["ev"] == "formed" and e["gen"] == gen]
            if not formed or formed[0].get("synced_bytes", 0) <= 0:
                return Verdict(name, FAIL, f"joiner {w} did not receive the state in {gen}")
        leavers = [w for w in rec.before if w not in rec.after]
        for w in leavers:
            states = [e.get("state") for e in of(w) if e["ev"] == "exit"]
            rc = _worker(record, rec.run, w).proc.returncode
            if states != ["left"] or rc != 0:
                return Verdict(name, FAIL, f"{w} should have left with rc 0; it ended {states} rc={rc}")
        rank0 = of(rec.after[0])
        switch = next((e["t"] for e in rank0 if e["ev"] == "switch" and e.get("seq") == rec.seq), None)
        resumed = next((e["t"] for e in rank0 if e["ev"] == "resumed" and e["gen"] == gen), None)
        pause = round(resumed - switch, 4) if switch is not None and resumed is not None else None
        how = "a new world formed, the joiners got the state" if joiners else \
            "the stayers narrowed their group" if all(
                e.get("synced_bytes", 0) == 0 for w in stayers for e in of(w) if e["ev"] == "formed" and
                e["gen"] == gen) else "the stayers formed a new world"
        return Verdict(name, PASS, f"in place: {len(stayers)} worker(s) kept their processes, {how}; "
                       f"paused {pause} s (order {rec.seq})", {"pause_s": pause, "seq": rec.seq})
    if kind == "kill":
        for w in rec.after:
            got = [e for e in of(w) if e["ev"] == "recovered"]
            if not got or got[-1].get("world") != world:
                return Verdict(name, FAIL, f"survivor {w} did not recover into {world} workers")
        firsts = [e["t"] for e in new_steps[rec.after[0]]]
        went_on = round(min(firsts) - rec.t, 4) if firsts else None
        since = next((e.get("since") for e in of(rec.after[0]) if e["ev"] == "recovered"), None)
        return Verdict(name, PASS, f"{rec.before[-1]} killed; {world} survivors went on from the last step "
                       f"boundary {went_on} s after the kill (the recovery itself {_r(since)} s)",
                       {"went_on_s": went_on, "recovery_s": _r(since)})
    # requeue
    old0 = of(rec.before[0])
    if not any(e["ev"] == "checkpoint" for e in old0):
        return Verdict(name, FAIL, f"{rec.before[0]} (rank 0) wrote no checkpoint on SIGTERM")
    for w in rec.before:
        states = [e.get("state") for e in of(w) if e["ev"] == "exit"]
        if states != ["done"]:
            return Verdict(name, FAIL, f"{w} ended {states} on SIGTERM, not done")
    new0 = of(rec.after[0], rec.run + 1)
    if not any(e["ev"] == "resumed_from" for e in new0):
        return Verdict(name, FAIL, f"the requeued {rec.after[0]} did not resume from the checkpoint")
    last_old = max((e["step"] for e in old0 if e["ev"] == "step"), default=0)
    first_new = min((e["step"] for e in new0 if e["ev"] == "step"), default=0)
    if first_new != last_old + 1:
        return Verdict(name, FAIL, f"stopped after step {last_old} but resumed at step {first_new}")
    firsts = [e["t"] for e in new0 if e["ev"] == "step"]
    went_on = round(min(firsts) - rec.t, 2) if firsts else None
    return Verdict(name, PASS, f"stopped at step {last_old} with a checkpoint; {world} restarted workers "
                   f"resumed at step {first_new}, {went_on} s after SIGTERM (not in place: a requeue restarts)",
                   {"restart_s": went_on, "stopped_at": last_old})


def _r(x: Any) -> Any:
    return round(x, 4) if isinstance(x, float) else x


def epoch_size(record: RunRecord) -> int | None:
    """The dataset's size, from rank 0's reports (``epoch_size``)."""
    for path in record.reports:
        for line in _read_jsonl(path):
            if isinstance(line.get("epoch_size"), int) and line["epoch_size"] > 0:
                return int(line["epoch_size"])
    return None


def sample_verdict(record: RunRecord, seed: int) -> Verdict:
    """``samples``: every sample of every epoch trained exactly once, counted step by step.

    Each step counts once, in the newest generation that logged it (a step redone after a rollback
    counts once). A step whose records lack a rank (a worker that died, or a survivor that went on
    from a peer's state, before logging it) is completed from the sampler, which is deterministic;
    where the records are there, they must equal the sampler's.
    """
    from slurm_elastic_launcher.sampler import ElasticSampler, SamplerState

    size = epoch_size(record)
    if size is None:
        return Verdict("samples", NOT_CHECKED, "no progress report gave the epoch's size (did the job train?)")
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for key, events in _events(record).items():
        run = record.workers[key].run
        for e in events:
            if e.get("ev") == "step":
                by_step[int(e["step"])].append({**e, "run": run})
    if not by_step:
        return Verdict("samples", FAIL, "no step was logged")
    seen: dict[int, list[int]] = defaultdict(list)
    position: dict[int, int] = {}
    completed = 0
    for step in sorted(by_step):
        groups: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
        for r in by_step[step]:
            groups[(r["run"], r["gen"])].append(r)
        recs = max(groups.values(), key=lambda g: max(r["t"] for r in g))
        head = recs[0]
        epoch, consumed, world, local, n = (int(head[k]) for k in ("epoch", "consumed", "world", "local", "n"))
        if any((r["epoch"], r["consumed"], r["world"], r["local"], r["n"]) != (epoch, consumed, world, local, n)
               for r in recs):
            return Verdict("samples", FAIL, f"step {step}: its workers disagree on the step: {recs}")
        if position.get(epoch, 0) != consumed:
            return Verdict("samples", FAIL, f"step {step} starts epoch {epoch} at sample {consumed}, but the "
                           f"steps before it ended at {position.get(epoch, 0)}: samples "
                           f"{'repeated' if consumed < position.get(epoch, 0) else 'skipped'}")
        sampler = ElasticSampler(size, SamplerState(seed, epoch, consumed))
        logged = {int(r["rank"]): r.get("indices") for r in recs}
        for rank in range(world):
            expected = sampler.indices(world, rank, local)
            got = logged.get(rank)
            if got is not None and list(got) != expected:
                return Verdict("samples", FAIL, f"step {step}: rank {rank} trained {list(got)[:8]}..., "
                               f"the sampler's share is {expected[:8]}...")
            seen[epoch].extend(expected)
        completed += len(logged) < world
        position[epoch] = consumed + n
    epochs = sorted(seen)
    # From the job's first epoch: a script's own numbering may start at 1 (world.epochs(n + 1, start=1)),
    # and that epoch's first step must still start at its sample 0 (the position check above).
    if epochs != list(range(epochs[0], epochs[-1] + 1)):
        return Verdict("samples", FAIL, f"epochs {epochs} were trained: not one after another from {epochs[0]}")
    for epoch in epochs:
        ids = seen[epoch]
        if len(ids) != len(set(ids)):
            return Verdict("samples", FAIL, f"epoch {epoch}: {len(ids) - len(set(ids))} samples trained twice")
        whole = epoch < epochs[-1] or record.ended
        if whole and sorted(ids) != list(range(size)):
            return Verdict("samples", FAIL, f"epoch {epoch}: {size - len(set(ids))} of {size} samples never trained")
    return Verdict("samples", PASS, f"{len(epochs)} epochs ({epochs[0]}..{epochs[-1]}) of {size} samples: each "
                   "sample trained exactly once "
                   f"per epoch, over {len(by_step)} steps" + (f" ({completed} steps completed from the sampler "
                                                             "for ranks lost before they logged)" if completed
                                                             else ""),
                   {"epochs": len(epochs), "epoch_size": size, "steps": len(by_step)})


def final_loss(record: RunRecord) -> float | None:
    """Mean training loss of rank 0 over the last epoch, from the progress reports (None: none)."""
    size = epoch_size(record)
    lines = [r for p in record.reports for r in _read_jsonl(p)
             if r.get("kind") in ("progress", "resize", "end") and isinstance(r.get("loss"), (int, float))]
    if not lines or size is None:
        return None
    total = max(int(r.get("samples", 0)) for r in lines)
    last_start = (total - 1) // size * size  # samples before the last epoch began
    tail = [float(r["loss"]) for r in lines if int(r.get("samples", 0)) > last_start]
    return sum(tail) / len(tail) if tail else None


def loss_verdict(record: RunRecord, baseline: RunRecord | None, tolerance: float) -> Verdict:
    """``final loss``: the rehearsal's last-epoch loss within ``tolerance`` (relative) of the baseline's."""
    if baseline is None:
        return Verdict("final loss", NOT_CHECKED, "no fixed-size run (--no-baseline)")
    if baseline.failure or not baseline.ended:
        return Verdict("final loss", FAIL, "the fixed-size run failed: " + baseline.failure.splitlines()[0]
                       if baseline.failure else "the fixed-size run did not end")
    mine, ref = final_loss(record), final_loss(baseline)
    if mine is None or ref is None:
        return Verdict("final loss", NOT_CHECKED, "the script passed no loss to world.step(loss), so no report "
                       "carries one")
    if mine == 0.0 and ref == 0.0:
        return Verdict("final loss", NOT_CHECKED, "the last epoch's mean loss is exactly 0 in both runs: a loss "
                       "that does not depend on the model (such as cross_entropy over one output) cannot "
                       "show a difference", {"elastic": 0.0, "fixed": 0.0})
    diff = abs(mine - ref) / max(abs(ref), 1e-12)
    ok = diff <= tolerance
    return Verdict("final loss", PASS if ok else FAIL,
                   f"last epoch's mean loss {mine:.4f} elastic, {ref:.4f} at a fixed size: "
                   f"{100 * diff:.1f}% apart ({'within' if ok else 'beyond'} the tolerance of {100 * tolerance:g}%)",
                   {"elastic": round(mine, 6), "fixed": round(ref, 6), "relative_diff": round(diff, 6),
                    "tolerance": tolerance})


def stale_rank_verdict(record: RunRecord) -> Verdict:
    """``stale rank``: the script's own calls of the default group's rank and size agreed with the world's."""
    name = "stale rank"
    if not record.probed:
        return Verdict(name, NOT_CHECKED, "the command is not `python SCRIPT ...` or `python -m MODULE ...`, so "
                       "the probe could not run it")
    stale: list[dict[str, Any]] = []
    unprobed = []
    for w in record.workers.values():
        lines = _read_jsonl(w.probe)
        if w.proc.returncode == 0 and not any(x.get("ev") == "probe" for x in lines):
            unprobed.append(w.key)
        stale += [x for x in lines if x.get("ev") == "stale"]
    if not any(e.get("ev") == "step" for events in _events(record).values() for e in events):
        return Verdict(name, NOT_CHECKED, "no step was trained")
    if unprobed:
        return Verdict(name, NOT_CHECKED, f"the probe did not run in {unprobed}")
    if stale:
        first = stale[0]
        where = sorted({str(x["where"]) for x in stale})
        return Verdict(name, FAIL, f"{len(stale)} stale reads: {first['call']} returned {first['got']} where the "
                       f"world's is {first['world']} ({first['worker']} in {first['gen']}), at {', '.join(where[:3])}: "
                       "use world.rank / world.size", {"stale": stale[:10]})
    return Verdict(name, PASS, "every call of torch.distributed.get_rank()/get_world_size() by the script agreed "
                   "with world.rank/world.size (a rank the script keeps in a variable of its own is not checked)")


def script_checkpoint_verdict(path: Path | None, key: str, epochs: int | None) -> Verdict:
    """``script checkpoint``: the script's own checkpoint names the last epoch trained."""
    name = "script checkpoint"
    if path is None:
        return Verdict(name, NOT_CHECKED, "no --script-checkpoint PATH was given")
    if not path.is_file():
        return Verdict(name, FAIL, f"{path} was not written")
    if epochs is None:
        return Verdict(name, NOT_CHECKED, "the epochs trained are not known (the sample count failed)")
    try:
        import torch

        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # any unreadable file is this check's finding, named
        return Verdict(name, FAIL, f"{path} could not be read with torch.load(weights_only=True): {exc}")
    if not isinstance(state, dict) or key not in state:
        return Verdict(name, FAIL, f"{path} has no {key!r} entry")
    got = state[key]
    try:
        value = int(got)
    except (TypeError, ValueError):
        return Verdict(name, FAIL, f"{path}[{key!r}] = {got!r} is not an epoch number")
    if value not in (epochs - 1, epochs):
        return Verdict(name, FAIL, f"{path}[{key!r}] = {value}, but {epochs} epochs were trained (expected "
                       f"{epochs - 1}, the last epoch's index, or {epochs}, the count)")
    return Verdict(name, PASS, f"{path}[{key!r}] = {value} after {epochs} epochs", {"epoch": value})


def to_json(verdicts: list[Verdict]) -> list[dict[str, Any]]:
    """The verdicts as JSON-ready dicts."""
    return [json.loads(json.dumps({"check": v.name, "status": v.status, "detail": v.detail, **v.figures},
                                  default=str)) for v in verdicts]
