"""Other x86-64 CPUs, as far as one machine can play them: the environments that make OpenBLAS,
numpy, numba and glibc take the code paths they take on an older or different CPU.

A result that depends on the CPU passes where it was pinned and fails elsewhere. Four parts of the
stack choose code by CPU at run time, and each can be told to choose as on a lesser one:

* **OpenBLAS** its kernel: ``OPENBLAS_CORETYPE`` (``SkylakeX``, ``Haswell``, ``Zen``,
  ``Sandybridge``, ``Prescott``);
* **numpy** its SIMD loops (``np.exp``, ``np.log``, ...): ``NPY_DISABLE_CPU_FEATURES`` names the
  dispatch targets to leave out;
* **numba** the instructions it compiles for: ``NUMBA_CPU_NAME``;
* **glibc** its libm variants (with or without FMA): ``GLIBC_TUNABLES=glibc.cpu.hwcaps=-FMA,...``;
* **torch** its ATen kernels (``ATEN_CPU_CAPABILITY``: ``avx512``, ``avx2``, ``default``) and
  oneDNN's (``ONEDNN_MAX_CPU_ISA``): the launcher's training steps, not the planners.

:func:`emulations` lists the CPUs this machine can play (a machine plays only CPUs below it: an
AVX2 machine cannot run an AVX-512 kernel), each as the environment to run a command in.
``scripts/portability-check`` runs the plan pins and the reproduce smoke tests under each;
``tests/unit/test_portable.py`` runs the portable arithmetic under each.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Emulation:
    """One CPU to play.

    Attributes:
        name: how reports call it.
        needs: the CPU flags (``/proc/cpuinfo``) this machine must have to play it.
        blas: ``OPENBLAS_CORETYPE``.
        numpy_level: the highest numpy dispatch level kept (``"native"``, ``"avx2"``, ``"sse"``).
        numba_cpu: ``NUMBA_CPU_NAME`` (``""``: this machine's).
        glibc_off: the glibc hwcaps turned off (``-FMA`` and so on).
        torch_isa: ``(ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA)`` (empty: this machine's).
    """

    name: str
    needs: frozenset[str]
    blas: str
    numpy_level: str
    numba_cpu: str
    glibc_off: tuple[str, ...]
    torch_isa: tuple[str, str] | tuple[()] = ()

    def environment(self, dispatch: list[str]) -> dict[str, str]:
        """The variables that make a process choose as on this CPU, given numpy's dispatch
        targets on this machine (``numpy._core._multiarray_umath.__cpu_dispatch__``)."""
        env = {"OPENBLAS_CORETYPE": self.blas}
        off = [d for d in dispatch if _dispatch_level(d) > _LEVELS[self.numpy_level]]
        if off:
            env["NPY_DISABLE_CPU_FEATURES"] = " ".join(off)
        if self.numba_cpu:
            env["NUMBA_CPU_NAME"] = self.numba_cpu
        if self.glibc_off:
            env["GLIBC_TUNABLES"] = "glibc.cpu.hwcaps=" + ",".join(f"-{f}" for f in self.glibc_off)
        if self.torch_isa:
            env["ATEN_CPU_CAPABILITY"], env["ONEDNN_MAX_CPU_ISA"] = self.torch_isa
        return env


_LEVELS = {"sse": 0, "avx": 1, "avx2": 2, "native": 3}


def _dispatch_level(target: str) -> int:
    """The level of one of numpy's dispatch targets (names of numpy 1.26 and 2.x alike)."""
    name = target.upper()
    if "512" in name or name == "X86_V4":
        return 3
    if name in {"X86_V3", "AVX2", "FMA3", "FMA4"}:
        return 2
    if name.startswith("AVX") or name == "F16C":
        return 1
    return 0


EMULATIONS = (
    Emulation("SkylakeX (AVX-512)", frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"}), "SkylakeX",
              "native", "", ()),
    Emulation("Haswell (AVX2, FMA)", frozenset({"avx2", "fma"}), "Haswell", "avx2", "haswell", ("AVX512F",),
              ("avx2", "AVX2")),
    Emulation("Zen (AVX2, FMA)", frozenset({"avx2", "fma"}), "Zen", "avx2", "znver1", ("AVX512F",),
              ("avx2", "AVX2")),
    Emulation("Sandy Bridge (AVX, no FMA)", frozenset({"avx"}), "Sandybridge", "avx", "sandybridge",
              ("AVX512F", "AVX2", "FMA"), ("default", "AVX")),
    Emulation("Prescott (SSE only)", frozenset(), "Prescott", "sse", "nehalem",
              ("AVX512F", "AVX2", "FMA", "AVX"), ("default", "SSE41")),
)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """This machine's CPU flags (empty where ``/proc/cpuinfo`` is not readable)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def emulations(flags: frozenset[str] | None = None) -> list[Emulation]:
    """The CPUs this machine can play, the most capable first."""
    have = cpu_flags() if flags is None else flags
    return [e for e in EMULATIONS if e.needs <= have]


def numpy_dispatch() -> list[str]:
    """numpy's dispatch targets on this machine (numpy 2.x and 1.x name their module apart)."""
    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            return [str(t) for t in importlib.import_module(module).__cpu_dispatch__]
        except (ImportError, AttributeError):
            continue
    return []
