"""The committed paper tables are what the current code computes.

One row per method of ``benchmarks/results/tables_per_split.csv`` (one split, one k: the
session's ``one_split_rows``) is computed afresh and compared with the file at the precision
the file is written with (``%.6g``), or, for round-off-level quantities, to an absolute
tolerance. When a default of an estimator changes, this fails until the tables are
regenerated::

    python -m benchmarks.reproduce_tables --methods "<method>"
    python -m benchmarks.make_readme
"""

import math
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import methods, reproduce_tables

COMMITTED = Path(reproduce_tables.RESULTS) / "tables_per_split.csv"
TIMING_COLUMNS = ("fit_seconds",)
# Round-off, compared by absolute tolerance: the cross-checks (subspace distances of ~1e-14),
# and %Var and MMD^2 of a representation that is zero in exact arithmetic (INLP's d - k
# nullspace projections leave nothing of COMPAS at k = 2: %Var 1e-12 and MMD^2 0 or -2e-16,
# different under every BLAS kernel). Real values are far above these: %Var >= 2 and
# MMD^2 >= 4e-4 in every other committed row.
CROSS_CHECKS = ("gap_to_mean_gap_projection", "gap_to_orth_leace_pca")  # the latter needs LEACE
ABSOLUTE_TOLERANCE = {**dict.fromkeys(CROSS_CHECKS, 1e-12), "var": 1e-9, "mmd2": 1e-12}
# Everything else (accuracies and Delta_DP, fractions of a few hundred test rows; %Var and
# MMD^2) is what any machine computes up to round-off: the committed value is a rounding
# (%.6g) of it, so the fresh value lies within half a unit of the sixth digit of it, widened by
# a relative 1e-12 for the round-off. That holds for the MLP cells too: the MLP is fitted on one
# BLAS thread, and every representation has canonical column signs (benchmarks/methods.py; the
# MLP is not sign-invariant); this row agrees under the SkylakeX, Haswell, Zen, SandyBridge and
# Prescott kernels of OpenBLAS (OPENBLAS_CORETYPE).
ROUND_OFF = 1e-12


def committed_row(where, name):
    table = pd.read_csv(COMMITTED)
    rows = table[
        (table["dataset"] == where["dataset"])
        & (table["split"] == where["split"])
        & (table["k"] == where["k"])
        & (table["method"] == name)
    ]
    assert len(rows) == 1, f"{COMMITTED} has {len(rows)} rows for {where} {name}"
    return rows.iloc[0]


def reproduces(fresh, committed, column):
    """Whether ``fresh`` is a value that the committed (``%.6g``-printed) one can stand for."""
    if math.isnan(committed) or math.isnan(fresh):
        return math.isnan(committed) and math.isnan(fresh)
    printed_unit = 10.0 ** (math.floor(math.log10(abs(committed))) - 5) if committed else 0.0
    allowed = max(ABSOLUTE_TOLERANCE.get(column, 0.0), 0.5 * printed_unit)
    return abs(fresh - committed) <= allowed + ROUND_OFF * abs(committed)


@pytest.mark.parametrize("name", methods.ALL_METHODS)
def test_committed_row_is_reproduced(name, one_split_rows):
    available, reason = methods.availability(name)
    if not available:
        pytest.skip(reason)
    where, rows, _ = one_split_rows
    expected, fresh = committed_row(where, name), rows[name]
    compared = [
        c
        for c in expected.index
        if c not in reproduce_tables.ROW_KEYS + list(TIMING_COLUMNS)
        and not (c in CROSS_CHECKS and c not in fresh)
    ]
    stale = {
        column: (float(expected[column]), float(fresh.get(column, math.nan)))
        for column in compared
        if not reproduces(float(fresh.get(column, math.nan)), float(expected[column]), column)
    }
    assert not stale, (
        f"{COMMITTED.name} is stale for {name} ({where}); "
        f"(committed, now): {stale}. Regenerate: python -m benchmarks.reproduce_tables "
        f'--methods "{name}", then python -m benchmarks.make_readme'
    )


def test_the_comparison_forgives_printing_and_round_off_only():
    assert reproduces(37.02576442547943, 37.0258, "var")  # printed to six digits
    assert reproduces(37.02585, 37.0258, "var") and not reproduces(37.02586, 37.0258, "var")
    assert reproduces(1.04594e-12, 2.5138e-12, "var")  # %Var of a zero representation
    assert reproduces(0.0, -2.22045e-16, "mmd2") and not reproduces(1e-6, 0.0, "mmd2")
    assert not reproduces(0.34413, 0.105263, "lee:mlp_dp")  # an MLP cell that moved
    assert not reproduces(56.9501, 57.4899, "lee:mlp_acc") and reproduces(0.0, 0.0, "x_dp")
    assert reproduces(math.nan, math.nan, "erased_rank") and not reproduces(8.0, math.nan, "x")
