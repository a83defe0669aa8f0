"""The built-in workloads by name: what ``simulate --workload``, ``reproduce`` and ``train-drl`` take.

This module owns :data:`BUILTIN` and :func:`builtin`; the workloads themselves are in the paper
modules of this package.
"""

from __future__ import annotations

from slurm_elastic.errors import TraceError
from slurm_elastic.sim.workload import SimJobSpec
from slurm_elastic.workloads.dl2 import dl2_simulation
from slurm_elastic.workloads.ibm import IBM_CATEGORY_WORKLOADS, IBM_OVERLOAD, ibm_categories, ibm_category
from slurm_elastic.workloads.ones import ones_longhorn, ones_longhorn_50
from slurm_elastic.workloads.philly import ares_philly, philly_like

BUILTIN = ("ones-longhorn", "ones-longhorn-50", "ibm-categories", "ibm-categories-bursty", "ibm-categories-low",
           "ibm-categories-overload", *IBM_CATEGORY_WORKLOADS, "philly-like", "ares-philly", "dl2-simulation")


def builtin(name: str, seed: int, gpus: int) -> list[SimJobSpec]:
    """A built-in workload by name (see :data:`BUILTIN`)."""
    if name == "ones-longhorn":
        return ones_longhorn(seed)
    if name == "ones-longhorn-50":
        return ones_longhorn_50(seed)
    if name == "philly-like":
        return philly_like(1000, gpus, seed)
    if name == "ares-philly":
        return ares_philly(seed)
    if name == "dl2-simulation":
        return dl2_simulation(seed)
    if name in IBM_CATEGORY_WORKLOADS:
        category = int(name.removeprefix("ibm-category-").removesuffix("-overload"))
        return ibm_category(seed, category, gpus=gpus, load=IBM_OVERLOAD if name.endswith("-overload") else None)
    if name.startswith("ibm-categories"):
        arrival = {"ibm-categories": "high", "ibm-categories-bursty": "bursty", "ibm-categories-low": "low",
                   "ibm-categories-overload": "overload"}.get(name)
        if arrival:
            return ibm_categories(seed, gpus=gpus, arrival=arrival)
    raise TraceError(f"unknown workload {name!r}; built-in workloads: {', '.join(BUILTIN)}")
