"""Chinchilla's Figure 4 as extracted by Besiroglu et al. 2024: 245 runs (model size, FLOPs, loss) kept beside
the project in ../shared/data, not copied into it. Tests that read them are skipped where they are absent."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

CHINCHILLA = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "chinchilla_fig4_epoch_svg_extracted.csv"
)

needs_chinchilla = pytest.mark.skipif(
    not CHINCHILLA.exists(), reason="the Chinchilla data is beside the project"
)


def chinchilla_runs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(params, tokens, loss) of the runs in the file's order; tokens = FLOPs / (6 · params)."""
    with CHINCHILLA.open() as handle:
        rows = list(csv.DictReader(handle))
    params = np.array([float(row["Model Size"]) for row in rows])
    tokens = np.array([float(row["Training FLOP"]) for row in rows]) / (6 * params)
    return params, tokens, np.array([float(row["loss"]) for row in rows])
