"""The speed benchmark runs (its numbers are read by people, not asserted)."""

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_fit.py"


def test_bench_fit_quick_runs_and_reports_ratios(capsys):
    spec = importlib.util.spec_from_file_location("bench_fit", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(["--quick", "--repeats", "1"])
    assert len(rows) == len(module.QUICK_GRID)
    assert all(r["ratio"] > 0 and r["mean_gap"] < 1e-9 for r in rows)
    assert "worst ratio" in capsys.readouterr().out
