"""What DL2's supervised warm-up can reach, and the input standardisation that lets it get there.

This module owns three numpy functions of the warm-up (:mod:`slurm_elastic.drl.train`), kept
torch-free so that they can be tested alone:

* :func:`majority_accuracy`: the accuracy of always naming the teacher's most frequent action
  (the trivial baseline an imitation must beat);
* :func:`feature_ceiling`: the best accuracy any function of the state can reach on the
  samples: identical state vectors that the teacher answered differently cap it below 1 (an
  upper bound: where every state is distinct, as the continuous ages of a trace make them, it is
  1 whatever the teacher, and says only that no repeated state contradicts itself);
* :func:`input_moments` and :func:`fold_standardisation`: the per-input mean and standard
  deviation of the warm-up states, and a network trained on standardised inputs rewritten
  as one that takes the raw state, so that the saved model and the pure
  :func:`~slurm_elastic.core.drl.forward` stay as they are.

Why standardise (docs/drl.md, "The paper's teacher"): DRF's choice is a function of two
inputs per slot, ``allocated`` (one GPU is 1/16) and ``can_add``, while the inputs it ignores
(age, run time, remaining epochs and samples, all ``log1p``) reach 7-14. Trained on the raw
state the network stays at the majority baseline; on standardised inputs it imitates DRF.

It must not import torch, read files or draw random numbers.
"""

from __future__ import annotations

import hashlib

import numpy as np
from numpy.typing import NDArray

from slurm_elastic_predictor import portable

FloatArr = NDArray[np.float64]
IntArr = NDArray[np.int64]
#: A standard deviation below this counts as a constant input: it is centred, not scaled.
CONSTANT_STD = 1e-6
_ROWS = 65_536  # rows per chunk when the states run to gigabytes


def majority_accuracy(actions: IntArr) -> float:
    """The share of samples whose action is the most frequent one (0.0 for no sample)."""
    if not len(actions):
        return 0.0
    return float(np.bincount(actions).max() / len(actions))


def feature_ceiling(states: FloatArr, actions: IntArr) -> float:
    """The best accuracy a function of the state can reach on these samples.

    Samples with the same state vector (bit for bit) form a group; the best any function of
    the state can do is to give each group its most frequent action. 1.0 means the teacher's
    action is determined by what the features show; less, that it depends on something they
    hide. States are grouped by a 128-bit BLAKE2b digest of their bytes.
    """
    n = len(actions)
    if not n:
        return 0.0
    digests = np.empty(n, dtype="S16")
    rows = np.ascontiguousarray(states, dtype=np.float64)
    for i in range(n):
        digests[i] = hashlib.blake2b(rows[i].tobytes(), digest_size=16).digest()
    _, state_id = np.unique(digests, return_inverse=True)
    n_actions = int(actions.max()) + 1
    pair, count = np.unique(state_id.astype(np.int64) * n_actions + actions, return_counts=True)
    best = np.zeros(int(state_id.max()) + 1, dtype=np.int64)
    np.maximum.at(best, pair // n_actions, count)
    return float(best.sum() / n)


def input_moments(states: FloatArr) -> tuple[FloatArr, FloatArr]:
    """``(mean, std)`` of each input over the samples (population std; an input that does not
    vary, std below :data:`CONSTANT_STD`, gets std 1: centred, not scaled). Computed in chunks
    of rows, two passes, so that no copy of the states is made."""
    n = len(states)
    if not n:
        raise ValueError("input_moments: no sample")
    total = np.zeros(states.shape[1])
    for i in range(0, n, _ROWS):
        total += states[i:i + _ROWS].sum(axis=0)
    mean = total / n
    sq = np.zeros(states.shape[1])
    for i in range(0, n, _ROWS):
        sq += np.square(states[i:i + _ROWS] - mean).sum(axis=0)
    std = np.sqrt(sq / n)
    std[std < CONSTANT_STD] = 1.0
    return mean, std


def fold_standardisation(w: FloatArr, b: FloatArr, mean: FloatArr, std: FloatArr) -> tuple[FloatArr, FloatArr]:
    """The first layer ``(W, b)`` of a network trained on ``(x - mean) / std``, rewritten to take ``x``.

    ``((x - mean) / std) @ W + b == x @ (W / std[:, None]) + (b - (mean / std) @ W)`` up to
    rounding. ``W`` has shape ``(inputs, outputs)`` as in
    :class:`~slurm_elastic.core.drl.PolicyWeights`.
    """
    if not (w.shape[0] == len(mean) == len(std)) or b.shape != (w.shape[1],):
        raise ValueError(f"fold_standardisation: W{w.shape}, b{b.shape}, {len(mean)} means, {len(std)} stds")
    folded_w: FloatArr = w / std[:, None]
    folded_b: FloatArr = b - portable.vecmat(mean / std, w)
    return folded_w, folded_b
