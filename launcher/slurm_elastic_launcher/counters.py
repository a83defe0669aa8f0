"""The agent's counters as a typed record: the job's step, its samples, the order applied, the batch.

This module owns :class:`Counters`. The counters travel with the training state: a state transfer to
a joiner, the broadcast after a lost worker and a checkpoint carry them as the plain mapping
:class:`.state.TrainingState` keeps (``extra``), under the keys they have always had, so a
checkpoint written before this record existed still loads. The record is a typed view of that
mapping: every read converts the stored value to its field's type once, here, and every write
stores that type.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any, Generic, TypeVar, overload

_N = TypeVar("_N", int, float)


class _Counter(Generic[_N]):
    """One field of :class:`Counters`: a key of the mapping, read and written as ``kind``.

    Args:
        kind: the field's type (``int`` or ``float``); a stored value it cannot take raises as
            ``kind(value)`` does.
        default: what an absent key reads as; None: an absent key is a KeyError (the field is set
            when the first world forms, :meth:`Counters.start`, or arrives with the state).
    """

    def __init__(self, kind: Callable[[Any], _N], default: _N | None = None) -> None:
        self.kind: Callable[[Any], _N] = kind
        self.default: _N | None = default
        self.key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Counter[_N]: ...

    @overload
    def __get__(self, obj: Counters, owner: type) -> _N: ...

    def __get__(self, obj: Counters | None, owner: type) -> _Counter[_N] | _N:
        if obj is None:
            return self
        value: Any = obj.values.get(self.key)
        if value is None:
            if self.default is None:
                raise KeyError(f"counter {self.key!r} is not set: the worker has no state yet")
            return self.default
        typed: _N = self.kind(value)
        return typed

    def __set__(self, obj: Counters, value: _N) -> None:
        obj.values[self.key] = self.kind(value)


class Counters:
    """One worker's counters, kept in the mapping its training state syncs (module docstring).

    Args:
        values: the mapping (:attr:`.state.TrainingState.extra`), shared, not copied: a state that
            arrives refills it, and the record reads the new values.

    Attributes:
        step: global steps of the job so far (0 before the first world forms).
        samples: samples trained on so far, over all workers (0 in a checkpoint without them).
        applied_seq: the last order applied (resizes and stops; an order is never applied twice).
        lr_scale: the factor the LR has been scaled by, relative to the script's.
        local_target: exo: the per-worker batch the job keeps (an order's ``local_batch`` sets it).
        global_target: endo: the global batch the job keeps (an order's ``local_batch`` sets it).
        global_batch0: the global batch the script's LR was tuned for.
        local_batch: this worker's batch now (:mod:`.batch_policy` sets it for each world).
    """

    step = _Counter(int, 0)
    samples = _Counter(int, 0)
    applied_seq = _Counter(int)
    lr_scale = _Counter(float)
    local_target = _Counter(int)
    global_target = _Counter(int)
    global_batch0 = _Counter(int)
    local_batch = _Counter(int)

    FIELDS = ("step", "samples", "applied_seq", "lr_scale", "local_target", "global_target", "global_batch0",
              "local_batch")
    """The fields, in the order :meth:`as_dict` gives them."""

    def __init__(self, values: MutableMapping[str, Any]) -> None:
        self.values = values

    @property
    def started(self) -> bool:
        """Whether the counters hold a state (set by :meth:`start`, or arrived with one)."""
        return bool(self.values)

    def start(self, *, local_batch: int, workers: int, reference_workers: int) -> None:
        """The counters of a fresh job: step 0, no order applied, the LR as the script set it.

        Args:
            local_batch: the per-worker batch the job starts with.
            workers: workers of the first world.
            reference_workers: workers the script's LR was tuned for.
        """
        self.step = 0
        self.applied_seq = 0
        self.lr_scale = 1.0
        self.local_target = local_batch
        self.global_target = local_batch * workers
        self.global_batch0 = local_batch * reference_workers
        self.local_batch = local_batch

    def as_dict(self) -> dict[str, int | float]:
        """The fields that are set, by name (for logs and tests)."""
        return {name: getattr(self, name) for name in self.FIELDS if self.values.get(name) is not None}
