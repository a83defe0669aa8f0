"""``slurm-elastic rehearse``: a local elastic rehearsal of the user's own script before it is submitted.

This package owns the rehearsal: the ``--sequence`` grammar (:mod:`.sequence`), the driver that runs
the user's command as local worker processes and plays the daemon's role (:mod:`.driver`), the probe
each worker runs the script under (:mod:`.probe`), and the verdicts (:mod:`.checks`). It never talks
to Slurm; it imports the launcher's public modules (never the reverse). docs/rehearse.md is the
user's guide.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_elastic.rehearse import checks
from slurm_elastic.rehearse.checks import FAIL, Verdict
from slurm_elastic.rehearse.driver import Options, RunRecord, fixed_size, rehearse
from slurm_elastic.rehearse.sequence import DEFAULT, Sequence, SequenceError, parse

__all__ = ["DEFAULT", "Options", "Outcome", "SequenceError", "Verdict", "parse", "run"]


@dataclass
class Outcome:
    """A rehearsal's verdicts and where its files are.

    Attributes:
        verdicts: one per check, in the order printed.
        work: the folder holding the workers' outputs, event logs and reports.
        elastic: what the elastic run did.
        baseline: what the fixed-size run did (None with ``baseline=False``).
    """

    verdicts: list[Verdict]
    work: Path
    elastic: RunRecord
    baseline: RunRecord | None

    @property
    def passed(self) -> bool:
        """No check failed (a check not made is listed, and does not pass or fail the rehearsal)."""
        return not any(v.status == FAIL for v in self.verdicts)

    def to_json(self) -> dict[str, Any]:
        """The outcome as a JSON-ready dict."""
        return {"passed": self.passed, "work": str(self.work), "checks": checks.to_json(self.verdicts)}


def run(command: list[str], sequence: Sequence, options: Options, *, work: Path | None = None,
        baseline: bool = True, loss_tolerance: float = 0.25, script_checkpoint: Path | None = None,
        checkpoint_key: str = "epoch") -> Outcome:
    """Rehearse ``command`` through ``sequence``, then at a fixed size, and judge.

    Args:
        command: the user's command (argv), e.g. ``["python", "train.py", "--epochs", "2"]``.
        sequence: the actions.
        options: the driver's options.
        work: the folder for logs (a new temporary folder when None; kept).
        baseline: also run the script at the sequence's start size, for the final-loss check.
        loss_tolerance: the final-loss check's tolerance, relative to the fixed-size run's loss.
        script_checkpoint: the script's own checkpoint file, checked for its epoch; it must not exist
            yet (the rehearsal removes the one it made before the fixed-size run).
        checkpoint_key: the entry of that checkpoint holding the epoch.

    Raises:
        FileExistsError: ``script_checkpoint`` exists already (the script would resume from it).
    """
    if script_checkpoint is not None and script_checkpoint.exists():
        raise FileExistsError(f"--script-checkpoint {script_checkpoint}: exists; the script would resume from it "
                              "(move it away or name another)")
    folder = work if work is not None else Path(tempfile.mkdtemp(prefix="slurm-elastic-rehearse-"))
    elastic = rehearse(command, sequence, folder / "elastic", options)
    verdicts = [checks.run_verdict(elastic), *checks.action_verdicts(elastic)]
    verdicts += [Verdict(f"{i}. {a.label}", FAIL, "not reached: the rehearsal stopped before it")
                 for i, a in enumerate(sequence.actions, 1) if i > len(elastic.actions)]
    samples = checks.sample_verdict(elastic, options.seed)
    verdicts.append(samples)
    epochs = samples.figures.get("epochs") if samples.status == checks.PASS else None
    verdicts.append(checks.script_checkpoint_verdict(script_checkpoint, checkpoint_key, epochs))
    verdicts.append(checks.stale_rank_verdict(elastic))
    if script_checkpoint is not None:
        script_checkpoint.unlink(missing_ok=True)  # the rehearsal's own: the baseline must not resume from it
    base = fixed_size(command, sequence.start, folder / "fixed", options) if baseline and not elastic.failure else None
    if baseline and elastic.failure:
        verdicts.append(Verdict("final loss", checks.NOT_CHECKED, "the elastic run failed; no fixed-size run"))
    else:
        verdicts.append(checks.loss_verdict(elastic, base, loss_tolerance))
    if script_checkpoint is not None:
        script_checkpoint.unlink(missing_ok=True)
    return Outcome(verdicts, folder, elastic, base)
