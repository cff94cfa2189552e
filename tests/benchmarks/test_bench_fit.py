"""The speed benchmark runs (its numbers are read by people, not asserted)."""

import importlib.util
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_fit.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_fit", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_fit_quick_runs_and_reports_ratios(capsys):
    module = load_bench()
    rows = module.main(["--quick", "--repeats", "1", "--min-seconds", "0"])
    assert [(r["n"], r["d"], r["k"]) for r in rows] == list(module.QUICK_GRID)
    # --repeats 1 --min-seconds 0: one timing per cell, and a ratio that is a number
    assert all(r["repeats"] == 1 and math.isfinite(r["ratio"]) for r in rows)
    assert all(r["mean_gap"] < 1e-9 for r in rows)
    # the goal: 1.1 on cells whose fits take 20 ms or more, 1.3 on the smaller ones
    for r in rows:
        large = max(r["fairpca_cpu_s"], r["pca_cpu_s"]) >= module.LARGE_SECONDS
        assert r["goal"] == (module.GOAL_LARGE if large else module.GOAL_SMALL)
    out = capsys.readouterr().out
    assert "worst ratio" in out and "CPU ratio above the goal: " in out


def test_bench_fit_size_filters_select_cells():
    module = load_bench()
    rows = module.main(
        ["--quick", "--repeats", "2", "--min-seconds", "0", "--d", "50", "--k", "10"]
    )
    assert [(r["n"], r["d"], r["k"]) for r in rows] == [(2_000, 50, 10)]
    with pytest.raises(SystemExit):
        module.main(["--quick", "--n", "7"])
