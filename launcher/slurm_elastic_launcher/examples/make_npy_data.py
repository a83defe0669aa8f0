"""Write a dataset to disk as one ``.npy`` file per sample (``ROOT/<class>/<n>.npy``), for the
examples that read real files through ``DataLoader`` workers (``ddp_train.py``, ``train_elastic.py``).

The samples are class templates plus noise from a fixed seed (no download): ``python -m
slurm_elastic_launcher.examples.make_npy_data ROOT --samples 2048``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def write(root: Path, samples: int, classes: int = 10, side: int = 16, seed: int = 1234) -> int:
    """Write ``samples`` samples of ``classes`` classes under ``root``; the number written."""
    rng = np.random.default_rng(seed)
    templates = rng.standard_normal((classes, 1, side, side)).astype(np.float32)
    labels = rng.integers(0, classes, samples)
    for c in range(classes):
        (root / f"class{c:02d}").mkdir(parents=True, exist_ok=True)
    for n, label in enumerate(labels):
        x = templates[label] + 0.5 * rng.standard_normal((1, side, side)).astype(np.float32)
        np.save(root / f"class{label:02d}" / f"{n:06d}.npy", x)
    return samples


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and write the dataset."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("root", type=Path)
    ap.add_argument("--samples", type=int, default=2048)
    args = ap.parse_args(argv)
    write(args.root, args.samples)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
