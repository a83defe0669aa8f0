"""The rehearsal's probe: runs the user's script inside each rehearsal worker and watches it.

``python probe.py SCRIPT ARGS...`` (or ``python probe.py -m MODULE ARGS...``) runs the script as
``__main__`` with ``sys.argv`` as it would have been, after two changes that do not change what the
script computes:

* ``slurm_elastic_launcher.init`` (which ``slurm_elastic_launcher.ddp.init_process_group`` calls) is
  wrapped: a line says the script made the elastic world, the world it returns is kept, and with
  ``SLURM_ELASTIC_REHEARSE_PACE_S`` > 0 its ``step`` sleeps that long first (every rank alike, so
  no collective waits on it): a short script then lasts long enough for the rehearsal's actions;
* ``torch.distributed.get_rank`` and ``get_world_size`` (the default group's, ``group=None``),
  called by the script's own code while the world trains, are compared with the world's
  ``rank`` and ``size``. After a shrink the default group still holds the workers that left, so a
  script that asks it reads a stale rank. Each disagreement is one JSON line in
  ``SLURM_ELASTIC_REHEARSE_PROBE`` (the call, what it returned, the world's value, ``file:line``);
  the first line says the probe ran. A script that imported ``slurm_elastic_launcher.ddp`` and
  failed before it made the world gets a line ``dropin`` (ported, but its own code failed first).

It is run as a file by the worker's own Python, so it imports nothing of ``slurm_elastic``; only the
standard library, and torch and the launcher once the script is about to run.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_MAX_LINES = 50
"""Stale reads written at most per worker (the first ones say enough)."""


class _Probe:
    def __init__(self, path: str) -> None:
        self.path = path
        self.world: Any = None
        self.lines = 0
        self.here = {str(Path(__file__).resolve().parent)}

    def write(self, record: dict[str, Any]) -> None:
        if not self.path or self.lines >= _MAX_LINES:
            return
        self.lines += 1
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")

    def caller(self, skip: set[str]) -> str | None:
        """``file:line`` of the first frame outside torch and the launcher, or None if there is none
        (the launcher's own call, or torch's)."""
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if "slurm_elastic_launcher" in name or f"{os.sep}torch{os.sep}" in name:
                return None
            if not any(name.startswith(part) for part in skip):
                return f"{name}:{frame.f_lineno}"
            frame = frame.f_back  # type: ignore[assignment]
        return None

    def watch(self, what: str, real: Callable[..., int], current: Callable[[Any], int]) -> Callable[..., int]:
        def probed(group: Any = None, *args: Any, **kwargs: Any) -> int:
            got = real(group, *args, **kwargs)
            world = self.world
            if group is None and world is not None and world.agent is not None and world.training \
                    and world.joining is None:
                where = self.caller(self.here)
                if where is not None:
                    expected = current(world)
                    if got != expected:
                        self.write({"ev": "stale", "call": what, "got": got, "world": expected, "where": where,
                                    "gen": world.agent.generation, "worker": world.agent.me})
            return got

        return probed


def main() -> None:
    """Run the script named on the command line under the probe."""
    args = sys.argv[1:]
    if not args:
        raise SystemExit("usage: probe.py SCRIPT ARGS... | probe.py -m MODULE ARGS...")
    probe = _Probe(os.environ.get("SLURM_ELASTIC_REHEARSE_PROBE", ""))
    pace = float(os.environ.get("SLURM_ELASTIC_REHEARSE_PACE_S", "0") or 0)
    probe.write({"ev": "probe", "pace_s": pace, "pid": os.getpid()})

    import torch.distributed as dist

    import slurm_elastic_launcher

    real_init = slurm_elastic_launcher.init

    def init(*a: Any, **k: Any) -> Any:
        world = real_init(*a, **k)
        probe.world = world
        probe.write({"ev": "world"})  # the script is ported: it made the elastic world
        if pace > 0:
            real_step = world.step

            def step(*sa: Any, **sk: Any) -> Any:
                time.sleep(pace)
                return real_step(*sa, **sk)

            world.step = step  # type: ignore[method-assign]
        return world

    slurm_elastic_launcher.init = init
    rank = probe.watch("torch.distributed.get_rank()", dist.get_rank, lambda w: int(w.rank))
    size = probe.watch("torch.distributed.get_world_size()", dist.get_world_size, lambda w: int(w.size))
    dist.get_rank = rank
    dist.get_world_size = size
    try:
        if args[0] == "-m" and len(args) > 1:
            sys.argv = [args[1], *args[2:]]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(args)
            sys.path[0] = str(Path(args[0]).resolve().parent)
            runpy.run_path(args[0], run_name="__main__")
    except BaseException:
        if probe.world is None and "slurm_elastic_launcher.ddp" in sys.modules:
            probe.write({"ev": "dropin"})  # ported through the drop-in, but it failed before its init
        raise


if __name__ == "__main__":
    main()
