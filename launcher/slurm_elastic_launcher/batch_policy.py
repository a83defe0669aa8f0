"""The batch and LR policy: each world's per-worker batch, and the LR that follows the global batch.

This module owns the rule the agent applies whenever a world forms (the first one, a resize, a
recovery): exo keeps the per-worker batch, so the global batch scales with the workers; endo keeps
the global batch (gradient accumulation above the per-GPU limit, :mod:`.step_driver`). The LR is
scaled linearly with the global batch, relative to the one the script's LR was tuned for.
"""

from __future__ import annotations

from typing import Any

from .counters import Counters
from .env import ScalingMode


def apply_batch_policy(counters: Counters, scaling: ScalingMode, world: int, optimizer: Any, scheduler: Any,
                       override: int = 0) -> None:
    """Set the per-worker batch for a world of ``world`` workers and rescale the LR linearly.

    Exo keeps the per-worker batch (an order's ``local_batch`` replaces it), so the global batch
    scales with the workers; endo keeps the global batch (an order's ``local_batch`` is the new
    global batch) up to rounding to a multiple of the world size. The LR follows the global batch
    linearly, relative to the initial one.

    Args:
        counters: the worker's counters (targets, batch and LR scale are read and set).
        scaling: exo or endo.
        world: workers of the world.
        optimizer: its ``param_groups``' ``lr`` (and ``initial_lr``) are rescaled.
        scheduler: the LR scheduler, or None; its ``base_lrs``, if it has them, are rescaled.
        override: an order's ``local_batch`` (0: none).
    """
    if scaling is ScalingMode.EXO:
        if override:
            counters.local_target = override
        local = counters.local_target
    else:
        if override:
            counters.global_target = override
        local = max(1, round(counters.global_target / world))
    counters.local_batch = local
    scale = world * local / counters.global_batch0
    factor = scale / counters.lr_scale
    if factor != 1.0:
        for group in optimizer.param_groups:
            group["lr"] *= factor
            if "initial_lr" in group:
                group["initial_lr"] *= factor
        if scheduler is not None and hasattr(scheduler, "base_lrs"):
            scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]
    counters.lr_scale = scale
