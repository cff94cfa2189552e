"""The kernel benchmarks (``benchmarks/bench_kernel.py``): a tiny run prints every table."""

from benchmarks import bench_kernel


def test_quick_run_prints_every_table(capsys):
    bench_kernel.main(["--quick", "--threads", "1"])
    out = capsys.readouterr().out
    for table in ("exact fit", "Nystroem fit_transform at scale", "quality on Adult"):
        assert table in out
    # one row per table at the quick sizes: n = 300 exact, n = 2000 in a fresh process
    assert "\n   300 " in out and "\n   2000   100  kmeans++" in out
