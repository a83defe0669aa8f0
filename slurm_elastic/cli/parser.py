"""The ``slurm-elastic`` argument parser: every subcommand, option, default and unit, grouped by who uses it.

Every number has a type with a range (:mod:`slurm_elastic.argtypes`): integers in ASCII with a
sane upper bound (GPU counts at most :data:`~slurm_elastic.argtypes.GPUS_MAX`), seeds
``0 .. 2**32 - 1``, floats finite and in range. A bad word is refused before anything runs, in
one line (``slurm-elastic plan: error: argument --seed: -1: must be >= 0 and <= 4294967295``),
exit status 2, without the usage block.
"""

from __future__ import annotations

import argparse
import logging
import textwrap
from pathlib import Path
from typing import Any, NoReturn

from slurm_elastic import __version__
from slurm_elastic.argtypes import GPUS_MAX, comma_words, float_in, int_in, param, seed
from slurm_elastic.config import BACKENDS

log = logging.getLogger(__name__)
_positive_int = int_in(1, 1_000_000)
_gpus = int_in(1, GPUS_MAX)
_jobs = int_in(0, 100_000)
_repeat = int_in(1, 10_000)
_seed = seed
_param = param
_round_gap = float_in(0.0, 86_400.0)
DAY_S = 86_400.0


def horizon_s(text: str) -> float:
    """``--horizon S``: seconds of virtual time, ``0 < S <= MAX_HORIZON_S`` (a bad word names itself and the rule)."""
    from slurm_elastic.sim.workload import MAX_HORIZON_S

    try:
        return float_in(0.0, MAX_HORIZON_S, low_open=True)(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (seconds of virtual time at which each run is cut)") from None


def processes(text: str) -> int:
    """``--processes N``: the worker processes that run a command's simulations, ``1 .. MAX_PROCESSES``
    (a bad word names itself and the rule)."""
    from slurm_elastic.experiments.pool import MAX_PROCESSES

    try:
        return int_in(1, MAX_PROCESSES)(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (worker processes that run the simulations side by side)") from None


def _processes_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--processes", type=processes, default=None, metavar="N",
                   help="worker processes that run the (policy, seed) pairs side by side, 1..1024 (default: the "
                   "CPUs this process may use); the results are the same, byte for byte, as with 1")


def _rehearse_sequence(text: str) -> str:
    """``rehearse --sequence``: checked by its grammar (slurm_elastic.rehearse.sequence); a bad value is
    refused naming the value, the item and the rule."""
    from slurm_elastic.rehearse.sequence import SequenceError, parse

    try:
        parse(text)
    except SequenceError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--sequence ")) from None
    return text


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (exit status 2): the command,
    ``error:`` and argparse's message (naming the option and the rule), with no usage block."""

    def error(self, message: str) -> NoReturn:
        line = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {line} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="slurm-elastic", description="Elastic deep-learning scheduling for Slurm.",
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"slurm-elastic {__version__}")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser,
                           help="one of the commands below (slurm-elastic COMMAND --help for its options)")
    shown: dict[str, str] = {}

    def command(name: str, help: str, **kw: Any) -> argparse.ArgumentParser:
        """A subcommand, listed under its group in ``slurm-elastic --help`` (:data:`COMMAND_GROUPS`)."""
        shown[name] = help
        kw.setdefault("description", help[:1].upper() + help[1:] + ".")
        parser: argparse.ArgumentParser = sub.add_parser(name, **kw)
        return parser

    plan = command("plan", "plan a demo cluster with a policy and print the plan")
    plan.add_argument("--policy", default="ones", help="planner name (see --list-policies; default ones)")
    plan.add_argument("--gpus", type=_gpus, default=64, help="GPUs in the demo cluster (default 64)")
    plan.add_argument("--gpus-per-node", type=_gpus, default=4, help="GPUs per node (default 4)")
    plan.add_argument("--jobs", type=_jobs, default=24, help="jobs in the demo cluster (default 24)")
    plan.add_argument("--seed", type=_seed, default=1,
                      help="seed of the demo cluster and the planner (0..2**32-1, default 1)")
    plan.add_argument("--rounds", type=_repeat, default=1, help="plan this many times, carrying the memo (default 1)")
    plan.add_argument("--param", type=_param, action="append", default=[], metavar="KEY=VALUE",
                      help="planner parameter, e.g. generations=20 (repeatable)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--list-policies", action="store_true", help="list the policies and exit")

    sim = command("simulate", "replay a workload or trace under policies (the same planners as the daemon)",
                         description="Replay a built-in workload or a trace under policies on a virtual cluster. "
                         "Each policy runs inside site guards, as the daemon runs it: those of --config FILE, "
                         "else the shipped default guards (protect_rigid only); --no-guards runs the bare "
                         "policies (as reproduce does).")
    src = sim.add_mutually_exclusive_group(required=True)
    src.add_argument("--workload", help="built-in workload: " + ", ".join(workloads()))
    src.add_argument("--trace", type=Path, help="trace CSV (job_id, submit_time, num_gpus, duration, ...)")
    sim.add_argument("--gpus", type=_gpus, default=None, help="cluster GPUs (default: 64, or 40 for ibm-*)")
    sim.add_argument("--load", type=_loads, default=(), metavar="L,...",
                     help="offered loads, e.g. 0.6,0.9,1.2: each run's cluster is sized so the workload offers that "
                     "share of its GPUs (its GPU-time at the requested sizes over its arrival span); instead of "
                     "--gpus")
    sim.add_argument("--gpus-per-node", type=_gpus, default=4, help="GPUs per node of the virtual cluster (default 4)")
    sim.add_argument("--policy", default="ones,tiresias,optimus",
                     help="comma-separated policies, or all (every registered policy; default ones,tiresias,optimus)")
    sim.add_argument("--seeds", default="1", help="seeds, e.g. 1-5 (workload generation and planner; default 1)")
    sim.add_argument("--resize-cost", default="in-place", help="in-place, checkpoint or seconds (default in-place)")
    sim.add_argument("--round-gap", type=_round_gap, default=None, metavar="S",
                     help="fixed rounds at least S seconds apart, 0..86400, as the papers that planned at an "
                     "interval (default: the daemon's cadence, a round at the poll after each arrival, completion "
                     "or epoch end and every max_idle: --config's [daemon] poll_interval and max_idle, else 2 s "
                     "and 60 s)")
    sim.add_argument("--horizon", type=horizon_s, default=None, metavar="S",
                     help="cut each run at S seconds of virtual time, > 0 and <= 1e9 (about 31.7 "
                     "years); the jobs that did not end by then are named on stderr and in --json's "
                     "'unfinished' (default: every job arrives and a run ends when its last job does)")
    sim.add_argument("--param", type=_param, action="append", default=[], metavar="POLICY.KEY=VALUE",
                     help="planner parameter for one policy, e.g. ones.generations=20 (repeatable)")
    sim.add_argument("--json", type=Path, metavar="OUT", help="write all results as JSON here")
    sim.add_argument("--report", type=Path, metavar="DIR", help="write the HTML/PNG/CSV report here")
    sim.add_argument("--quiet", action="store_true", help="no progress bar")
    _processes_option(sim)
    _guard_options(sim)

    rep = command("reproduce", "the seed papers' comparisons as a markdown table (no site guards)",
                         description="The seed papers' comparisons as a markdown table and reports. Every policy "
                         "runs bare, without site guards: the papers' schedulers had none.")
    rep.add_argument("--seeds", default="1-5", help="seeds, e.g. 1-5 (default 1-5)")
    rep.add_argument("--out", type=Path, default=Path("reproduce"), help="output folder (default ./reproduce)")
    rep.add_argument("--quick", action="store_true", help="one seed, 40 GPUs only (a smoke run)")
    rep.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    _processes_option(rep)

    prof = command("profiles", "fit the throughput model on the shipped profiles and report its error")
    prof.add_argument("--json", action="store_true", help="print JSON")

    bench = command("bench", "benchmarks printing JSON")
    bsub = bench.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    bp = bsub.add_parser("planner", help="planning latency of one policy on a synthetic cluster")
    bp.add_argument("--gpus", type=_gpus, default=4096, help="GPUs of the synthetic cluster (default 4096)")
    bp.add_argument("--gpus-per-node", type=_gpus, default=4, help="GPUs per node (default 4)")
    bp.add_argument("--jobs", type=_jobs, default=1000, help="jobs in the synthetic queue (default 1000)")
    bp.add_argument("--policy", default="dp", help="the policy to time (default dp)")
    bp.add_argument("--repeat", type=_repeat, default=None,
                    help="timed plans; the median is reported (default 20, 3 with --scaling)")
    bp.add_argument("--seed", type=_seed, default=0, help="seed of the synthetic cluster and queue (default 0)")
    bp.add_argument("--param", type=_param, action="append", default=[], metavar="KEY=VALUE",
                    help="planner parameter, e.g. generations=1 (repeatable)")
    bp.add_argument("--reported", action="store_true",
                    help="every running job has reported (its prior kept): the policy runs in the trust guard, "
                         "as the daemon runs it")
    bp.add_argument("--scaling", action="store_true",
                    help="time the policy at 64, 128, ... 16384 GPUs (a quarter job per GPU; --repeat default 3) "
                         "and print one JSON row per size, with the functions taking the time")
    bp.add_argument("--json", action="store_true", help="print JSON (the default; kept for symmetry)")
    bz = bsub.add_parser("resize", help="pause of an in-place resize vs checkpoint-restart (the launcher)")
    bz.add_argument("--model", choices=("resnet18", "cnn"), default="resnet18",
                    help="the example model the workers train (default resnet18)")
    bz.add_argument("--from", dest="from_", type=_gpus, default=2, help="workers before the resize (default 2)")
    bz.add_argument("--to", type=_gpus, default=4, help="workers after the resize (default 4)")
    bz.add_argument("--repeat", type=_repeat, default=1, help="fresh jobs to measure (medians are printed; default 1)")
    bz.add_argument("--api", choices=("run", "loop"), default="run",
                    help="the workers train under run(ElasticJob) (default) or in a loop of their own (init())")
    bz.add_argument("--json", action="store_true", help="print JSON (the default)")
    bt = bsub.add_parser("step", help="step time under plain DistributedDataParallel and under the launcher, "
                         "same model, batch and world, in one run (the launcher)")
    bt.add_argument("--model", choices=("resnet18", "resnet50", "cnn"), default="resnet18",
                    help="the example model the workers train: resnet18 (62 tensors), resnet50 (161), or cnn "
                         "(8 tensors, a step of a few to tens of ms on CPU cores; default resnet18)")
    bt.add_argument("--workers", type=_gpus, default=2, help="worker processes, the world size (default 2)")
    bt.add_argument("--steps", type=_repeat, default=20,
                    help="timed steps of each, DDP and the launcher, in 5 alternating blocks (median; default 20)")
    bt.add_argument("--batch", type=_gpus, default=32, help="per-worker batch (default 32)")
    bt.add_argument("--dist-backend", choices=("auto", "gloo", "nccl"), default="auto",
                    help="collectives: auto is NCCL with CUDA, else gloo; workers sharing one GPU need gloo "
                    "(default auto)")
    bt.add_argument("--json", action="store_true", help="print JSON (the default)")
    br = bsub.add_parser("reaction", help="submit -> planned and -> running latency of the acting daemon "
                         "on a running dev cluster")
    br.add_argument("--root", type=Path, default=Path("/tmp/slurm-elastic-dev"),
                    help="the dev cluster's root (default /tmp/slurm-elastic-dev)")
    br.add_argument("--repeat", type=_repeat, default=5, help="resizes timed; the median is reported (default 5)")
    br.add_argument("--json", action="store_true", help="print JSON (the default)")
    bl = bsub.add_parser("load", help="the acting daemon under many elastic jobs on its own dev cluster "
                         "(3 nodes x 2 GPUs): preemptions, drain time against the ideal, round times")
    bl.add_argument("--root", type=Path, default=Path("/tmp/slurm-elastic-load"),
                    help="where to bring up the dev cluster, taken down when done (default %(default)s)")
    bl.add_argument("--jobs", type=int_in(1, 10_000), default=200, help="elastic jobs submitted (default 200)")
    bl.add_argument("--sleep", type=int_in(1, 3600), default=20, help="seconds each job runs (default 20)")
    bl.add_argument("--policy", default="efq", help="the acting daemon's policy (default efq)")
    bl.add_argument("--json", action="store_true", help="print JSON (the default)")
    bc = bsub.add_parser("chaos", help="the acting daemon SIGKILLed at each journaled step of a small workload "
                         "on its own dev cluster, then restarted; slurmctld stopped; a worker killed: jobs lost, "
                         "duplicate actions, orphans, strands")
    bc.add_argument("--root", type=Path, default=Path("/tmp/slurm-elastic-chaos"),
                    help="where to bring up the dev cluster, taken down when done (default %(default)s)")
    bc.add_argument("--points", default="", help="comma-separated crash points and faults (ctld:outage, "
                    "worker:kill; default: all of them)")
    bc.add_argument("--json", action="store_true", help="print JSON (the default)")
    bd = bsub.add_parser("fidelity", help="the simulator against the real dev cluster: one trace of launcher jobs "
                         "run by the acting daemon and simulated with the profile measured there (avg JCT, makespan)")
    bd.add_argument("--root", type=Path, default=Path("/tmp/slurm-elastic-fidelity"),
                    help="where to bring up the dev cluster (3 nodes x 2 GPUs), taken down when done "
                    "(default %(default)s)")
    bd.add_argument("--policy", default="dp", help="the policy of the daemon and the simulator (default dp)")
    bd.add_argument("--jobs", type=int_in(1, 100), default=12, help="launcher jobs in the trace (default 12)")
    bd.add_argument("--seed", type=_seed, default=0, help="seed of the trace and the simulated planner (default 0)")
    bd.add_argument("--replay", type=Path, metavar="DIR",
                    help="simulate again the real run recorded in DIR (a work folder an earlier run named), "
                    "without a cluster (default: run the trace for real)")
    bd.add_argument("--json", action="store_true", help="print JSON (the default)")
    bn = bsub.add_parser("learn", help="how well a job's own throughput model, fitted from its first sizes, "
                         "predicts every measured configuration of each shipped profile (median APE)")
    bn.add_argument("--prior", default="cifar10", help="the profile every job starts from (default cifar10, "
                    "the daemon's default model)")
    bn.add_argument("--sizes", default="1,2", help="comma-separated GPU counts the job reported at (default 1,2)")
    bn.add_argument("--json", action="store_true", help="print JSON (the default)")
    bo = bsub.add_parser("observe", help="rounds of observation of a large 25.11 site (JSON built from the "
                         "recorded fixtures) and their plans, timed by stage: decode, records, snapshot, plan")
    bo.add_argument("--nodes", type=int_in(1, 100_000), default=10_000, help="nodes of 4 GPUs (default 10000)")
    bo.add_argument("--jobs", type=int_in(0, 1_000_000), default=50_000, help="jobs in the queue (default 50000)")
    bo.add_argument("--policy", default="dp", help="the policy that plans the snapshot (default dp)")
    bo.add_argument("--repeat", type=_repeat, default=5,
                    help="timed rounds after the first; medians are printed (default 5)")
    bo.add_argument("--seed", type=_seed, default=0, help="seed of the jobs' sizes and kinds (default 0)")
    bo.add_argument("--churn", type=float_in(0.0, 1.0), default=0.01,
                    help="share of the jobs changed between two rounds, 0..1 (default 0.01)")
    bo.add_argument("--json", action="store_true", help="print JSON (the default)")
    bs = bsub.add_parser("simulate", help="wall time of a simulation of a Philly-like trace")
    bs.add_argument("--jobs", type=int_in(1, 1_000_000), default=10_000,
                    help="jobs of the Philly-like trace (default 10000)")
    bs.add_argument("--gpus", type=_gpus, default=1024, help="GPUs of the virtual cluster (default 1024)")
    bs.add_argument("--policy", default="dp", help="the policy simulated (default dp)")
    bs.add_argument("--seed", type=_seed, default=1, help="seed of the trace and the planner (default 1)")
    bs.add_argument("--round-gap", type=_round_gap, default=None, metavar="S",
                    help="fixed rounds at least S seconds apart, 0..86400 (default: the daemon's cadence)")
    bs.add_argument("--json", action="store_true", help="print JSON (the default)")

    bf = bsub.add_parser("fuzz", help="hostile inputs of every family through the real entry points "
                         "(slurm_elastic.fuzz): outcomes, foreign exceptions, failed rounds, honest jobs unplanned")
    bf.add_argument("--cases", type=int_in(0, 10_000_000), default=1000, help="cases to run (default 1000)")
    bf.add_argument("--seed", type=_seed, default=0, help="seed of the run; case i is rebuilt from seed and i")
    bf.add_argument("--quiet", action="store_true", help="no progress bar")
    bf.add_argument("--json", action="store_true", help="print JSON (the default)")

    dev = command("devcluster", "bring a real local Slurm dev cluster up or down (root only)")
    dsub = dev.add_subparsers(dest="devcluster", required=True, metavar="ACTION")
    for action, text in (("up", "start the dev cluster and wait until its nodes are idle"),
                         ("down", "stop the dev cluster and remove its namespaces, bridge, route, hosts lines"),
                         ("status", "print the dev cluster's daemons and node states as JSON")):
        da = dsub.add_parser(action, help=text)
        da.add_argument("--root", type=Path, default=Path("/tmp/slurm-elastic-dev"),
                        help="folder owning the cluster's files (default /tmp/slurm-elastic-dev)")
        if action == "up":
            da.add_argument("--nodes", type=int_in(1, 64), default=4, help="nodes, 1..64 (default 4)")
            da.add_argument("--gpus-per-node", type=int_in(1, 64), default=4,
                            help="fake GPUs per node, 1..64 (default 4)")
            da.add_argument("--slurm-prefix", type=Path, metavar="DIR",
                            help="run the Slurm release built into DIR by scripts/build-slurm "
                            "(default: Debian's 22.05)")

    comp = command("completion", "print the shell completion script (bash: "
                   "slurm-elastic completion bash > /etc/bash_completion.d/slurm-elastic)")
    comp.add_argument("shell", choices=("bash",), help="the shell (bash)")

    dm = command("daemon", "run the daemon beside slurmctld")
    dm.add_argument("--config", type=Path, default=Path("/etc/slurm/elastic.toml"),
                    help="the site configuration (default /etc/slurm/elastic.toml)")
    dm.add_argument("--dry-run", action="store_true", help="shadow mode: plan and log, never act")
    dm.add_argument("--once", action="store_true", help="run one round and exit")
    dm.add_argument("--backend", choices=BACKENDS, help="how Slurm is read, in place of daemon.backend "
                    "(default: the configuration's, itself auto: pyslurm when it matches the running Slurm, "
                    "else the CLI)")

    st = command("status", "elastic jobs: GPUs now and planned, batch, state")
    st.add_argument("--config", type=Path, default=Path("/etc/slurm/elastic.toml"),
                    help="the site configuration (default /etc/slurm/elastic.toml)")
    st.add_argument("--json", action="store_true", help="print JSON instead of the table")
    st.add_argument("--backend", choices=BACKENDS, help="how Slurm is read, in place of daemon.backend "
                    "(default: the configuration's)")

    sb = command("submit", "render an sbatch template for an elastic job and submit it")
    sb.add_argument("--template", default="pytorch", help="the packaged sbatch template "
                    "slurm_elastic/sbatch_templates/<name>.sbatch.j2 (default pytorch)")
    sb.add_argument("--elastic", required=True, metavar="MIN:MAX", help="GPU range")
    sb.add_argument("--batch", default="", metavar="MIN:MAX", help="global batch range")
    sb.add_argument("--mode", default="exo", choices=("exo", "endo"),
                    help="exo: the daemon chooses the batch with the GPUs; endo: the job keeps its own (default exo)")
    sb.add_argument("--gpus-per-node", type=_gpus, default=4, help="GPUs per node the job asks for (default 4)")
    sb.add_argument("--local-batch", type=_positive_int, default=32, help="per-GPU batch in samples (default 32)")
    sb.add_argument("--cpus-per-task", type=int_in(1, 1024), default=None, metavar="N",
                    help="CPUs per worker, 1..1024 (sbatch --cpus-per-task, for the job and its satellites; its "
                    "workers see SLURM_CPUS_PER_TASK and OMP_NUM_THREADS=N; default: Slurm's, 1)")
    sb.add_argument("--epochs", type=_positive_int, default=1, help="epochs to train (default 1)")
    sb.add_argument("--job-name", default="elastic", help="the Slurm job name (default elastic)")
    sb.add_argument("--time", default="", help="the Slurm time limit, e.g. 02:00:00 (default: the partition's)")
    sb.add_argument("--account", default="", help="the Slurm account (default: yours)")
    sb.add_argument("--partition", default="", help="the Slurm partition (default: Slurm's default)")
    sb.add_argument("--output", default="slurm-%j.out",
                    help="the job's output file, Slurm patterns allowed (default slurm-%%j.out)")
    sb.add_argument("--dry-run", action="store_true", help="print the script instead of submitting it")
    sb.add_argument("train_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                    help="the training command and its arguments")

    rh = command("rehearse", "run your elastic training script as local workers through grows, shrinks, a lost "
                 "worker and a requeue, and check it before you submit it (docs/rehearse.md)")
    rh.add_argument("--sequence", type=_rehearse_sequence, default=None, metavar="START,ACTION,...",
                    help="the workers at the start, then actions +K (grow), -K (shrink), kill, requeue "
                    "(default 2,+1,-2,+1,kill,requeue)")
    rh.add_argument("--timeout", type=int_in(1, 3600), default=120, metavar="S",
                    help="the longest wait for any one phase, seconds (default 120)")
    rh.add_argument("--settle-steps", type=int_in(1, 1000), default=3, metavar="N",
                    help="steps every worker trains in a new world before the next action (default 3)")
    rh.add_argument("--pace", type=float_in(0.0, 10.0), default=0.0, metavar="S",
                    help="least seconds per step, so a short script outlasts the sequence (default 0)")
    rh.add_argument("--seed", type=seed, default=0, help="the sampler's seed (default 0)")
    rh.add_argument("--cpus-per-task", type=int_in(1, 1024), default=None, metavar="N",
                    help="each worker's SLURM_CPUS_PER_TASK and OMP_NUM_THREADS, as submit --cpus-per-task N "
                    "gives them (default: unset, as in a job without it)")
    rh.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                    help="cpu: no GPU visible to the workers; gpu: the local GPUs (default cpu)")
    rh.add_argument("--loss-tolerance", type=float_in(0.0, 100.0), default=0.25, metavar="R",
                    help="final loss within R (relative) of a run at a fixed size (default 0.25)")
    rh.add_argument("--no-baseline", action="store_true", help="skip the fixed-size run (no final-loss check)")
    rh.add_argument("--script-checkpoint", type=Path, default=None, metavar="PATH",
                    help="the script's own checkpoint file, checked for the last epoch; must not exist yet")
    rh.add_argument("--checkpoint-key", default="epoch", help="its entry holding the epoch (default epoch)")
    rh.add_argument("--workdir", type=Path, default=None, metavar="DIR",
                    help="where the workers' outputs and logs go (default: a new temporary folder)")
    rh.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    rh.add_argument("train_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                    help="the training command, e.g. -- python train.py --epochs 2")

    from slurm_elastic.drl import command as drl_command

    td = command("train-drl", "train the drl (DL2) policy in the simulator and write its model file")
    drl_command.add_arguments(td)  # its numeric options have the ranged argtypes too

    dm = command("demo", "end to end on a real local Slurm cluster: daemon, elastic jobs resized "
                        "in place while they train, allocation report (root; a few minutes)")
    dm.add_argument("--out", type=Path, default=Path("out/demo"),
                    help="folder for logs, store and report (default out/demo)")
    dm.add_argument("--policy", default="efq", help="planner (default efq: fair sharing makes resizes visible)")
    dm.add_argument("--nodes", type=int_in(1, 64), default=3, help="dev cluster nodes (default 3)")
    dm.add_argument("--gpus-per-node", type=int_in(1, 64), default=2, help="GPUs per dev node (default 2)")
    dm.add_argument("--timeout", type=float_in(0.0, DAY_S, low_open=True), default=600.0,
                    help="seconds before the demo gives up waiting (at most 86400, default 600)")
    dm.add_argument("--keep", action="store_true", help="leave the dev cluster running afterwards")

    cc = command("check-config", "validate an elastic.toml; prints the effective settings")
    cc.add_argument("file", type=Path, help="the elastic.toml to check")

    ar = command("report", "GPU allocation report from sacct: by account/user/partition, utilization")
    ar.add_argument("--since", required=True, metavar="DATE", help="YYYY-MM-DD[THH:MM[:SS]], today, now-7d ...")
    ar.add_argument("--until", default="now", metavar="DATE", help="end of the window (default now)")
    ar.add_argument("--account", help="only this Slurm account (sacct -A)")
    ar.add_argument("--format", choices=("html", "csv", "json"), default="html", help="output format (default html)")
    ar.add_argument("--out", type=Path, required=True, metavar="DIR", help="report folder")
    ar.add_argument("--store", type=Path, metavar="FILE",
                    help="the daemon's state database (journaled resizes, launcher reports, satellites)")
    ar.add_argument("--config", type=Path, metavar="FILE", help="the daemon's elastic.toml: the site profiles and "
                    "default model its throughput predictions are judged with (default: the shipped profiles)")

    wi = command("what-if", "replay a window of the cluster's history under policies (simulated)",
                        description="Replay a window of the cluster's history (sacct) under policies on a virtual "
                        "cluster. Each policy runs inside site guards, as the daemon runs it: those of "
                        "--config FILE, else the shipped default guards (protect_rigid only); --no-guards runs "
                        "the bare policies.")
    wi.add_argument("--since", required=True, metavar="DATE", help="YYYY-MM-DD[THH:MM[:SS]], today, now-7d ...")
    wi.add_argument("--until", default="now", metavar="DATE", help="end of the window (default now)")
    wi.add_argument("--account", help="only this Slurm account (sacct -A)")
    wi.add_argument("--policy", required=True, help="comma-separated policies")
    wi.add_argument("--gpus", type=_gpus, required=True, help="GPUs of the virtual cluster")
    wi.add_argument("--gpus-per-node", type=_gpus, default=4, help="GPUs per node of the virtual cluster (default 4)")
    wi.add_argument("--seeds", default="1", help="planner seeds, e.g. 1-3 (default 1)")
    wi.add_argument("--elastic-range", type=float_in(1.0, 1024.0), default=4.0,
                    help="a job without an elastic contract may use 1..GPUs x this, 1..1024 (default 4)")
    wi.add_argument("--resize-cost", default="in-place", help="in-place, checkpoint or seconds (default in-place)")
    wi.add_argument("--no-site-physics", action="store_true", help="leave out the start and end latencies measured "
                    "from the window's sacct (applied by default: docs/reproduce-results.md)")
    wi.add_argument("--param", type=_param, action="append", default=[], metavar="POLICY.KEY=VALUE",
                    help="planner parameter for one policy (repeatable)")
    wi.add_argument("--json", type=Path, metavar="OUT", help="write all results as JSON here")
    wi.add_argument("--report", type=Path, metavar="DIR", help="write the HTML/PNG/CSV simulation report here")
    wi.add_argument("--quiet", action="store_true", help="no progress bar")
    _processes_option(wi)
    _guard_options(wi)

    pf = command("profile", "measure the site's own throughput profiles through Slurm (one fixed-size "
                        "launcher job per model, placement and batch) and write a profile folder for "
                        "daemon.profiles")
    pf.add_argument("--out", type=Path, required=True, metavar="DIR", help="the profile folder (a sub-folder per "
                    "model; an existing one is never overwritten)")
    pf.add_argument("--models", default="cnn", help="comma-separated models of the example trainer: cnn, resnet18 "
                    "(default cnn)")
    pf.add_argument("--placements", default="1,2,11,22", help="comma-separated placements, one digit per node: its "
                    "GPUs (default 1,2,11,22; needs 1, one node with several GPUs, and several nodes)")
    pf.add_argument("--batches", default="32,128", help="comma-separated per-GPU batches (default 32,128)")
    pf.add_argument("--steps", type=int_in(20, 100_000), default=200, help="training steps of each job (default 200)")
    pf.add_argument("--partition", default="", help="the partition to measure (default: Slurm's default)")
    pf.add_argument("--json", action="store_true", help="print JSON (the default)")

    ip = command("install-plugin", "build the --elastic SPANK plugin; print (or write) its config lines")
    ip.add_argument("--out", type=Path, default=Path("build/spank"),
                    help="folder for slurm_elastic.so (default build/spank)")
    ip.add_argument("--write", type=Path, metavar="PLUGSTACK_FILE",
                    help="add the plugstack line to this file and copy job_submit.lua next to it")
    ip.add_argument("--slurm-prefix", type=Path, metavar="DIR",
                    help="build against the Slurm installed into DIR (its include/slurm/spank.h) "
                    "(default: pkg-config's slurm, else /usr/include); the plugin must match the running "
                    "slurmctld's major.minor or nothing is built (exit 2)")
    ip.add_argument("--site-files", type=Path, metavar="DIR",
                    help="also write the daemon's systemd unit (slurm-elastic.service) and a configuration to "
                    "start from (elastic.toml, Longhorn's) into DIR, never over an existing "
                    "file (default: not written)")
    p.epilog = _grouped(shown)
    return p


COMMAND_GROUPS = {
    "users": ("submit", "rehearse", "status", "completion"),
    "site admins": ("daemon", "check-config", "install-plugin", "profile", "what-if"),
    "center managers": ("report",),
    "developers": ("simulate", "reproduce", "bench", "profiles", "plan", "train-drl", "devcluster", "demo"),
}
"""Who uses each subcommand: ``slurm-elastic --help`` lists them so (every one is in one group)."""


def _grouped(shown: dict[str, str]) -> str:
    """The commands of ``slurm-elastic --help``, by who uses them, each with its one-line help."""
    width = max(map(len, shown)) + 4
    lines = []
    for group, names in COMMAND_GROUPS.items():
        lines.append(f"commands for {group}:")
        for name in names:
            lines += textwrap.wrap(shown[name], 100, initial_indent=f"  {name:<{width}}",
                                   subsequent_indent=" " * (width + 2))
    return "\n".join(lines)


def _loads(text: str) -> tuple[float, ...]:
    """``0.6,0.9,1.2`` -> offered loads, each a number in (0, 10]."""
    out = []
    for word in comma_words(text):
        try:
            value = float(word)
        except ValueError:
            value = float("nan")
        if not (0 < value <= 10):
            raise argparse.ArgumentTypeError(f"{word[:40]!r}: each load must be a number in (0, 10], e.g. 0.9")
        out.append(value)
    if not out:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: name at least one load, e.g. 0.6,0.9,1.2")
    return tuple(out)


def _guard_options(p: argparse.ArgumentParser) -> None:
    """``--config FILE`` | ``--no-guards``: the site guards a simulated policy runs inside."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--config", type=Path, metavar="FILE",
                   help="site configuration (the daemon's elastic.toml): every policy runs inside its [guards] "
                   "table, the rest of the file is only validated (default: the shipped default guards, i.e. "
                   "protect_rigid only)")
    g.add_argument("--no-guards", action="store_true",
                   help="plan without site guards (the bare policies)")


def workloads() -> tuple[str, ...]:
    from slurm_elastic.workloads.catalog import BUILTIN

    return BUILTIN
