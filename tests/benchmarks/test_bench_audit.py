"""benchmarks/bench_audit.py's pieces that need no audit: the generated table and the growth."""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.bench_audit import adult_like, markdown_table, with_growth


def test_adult_like_rows_are_seeded_noisy_and_carry_label_and_group():
    table = adult_like(500, seed=1)
    assert len(table) == 500 and {"sex", "income"} <= set(table.columns)
    assert set(table["income"]) <= {">50K", "<=50K"}
    pd.testing.assert_frame_equal(table, adult_like(500, seed=1))
    assert not table.duplicated().any()  # the noise makes drawn rows distinct
    assert np.all(np.mod(table["age"], 1) == 0)  # whole-number columns stay whole


def test_growth_is_each_size_over_the_previous_one():
    table = with_growth(pd.DataFrame({"rows": [20_000, 10_000], "wall_s": [30.0, 20.0]}))
    assert table["rows"].tolist() == [10_000, 20_000]
    assert table["wall_growth"].tolist()[1] == 1.5 and table["rows_growth"].tolist()[1] == 2.0
    assert table["wall_ms_per_row"].tolist() == [2.0, 1.5]
    assert markdown_table(table).splitlines()[0].startswith("| rows | wall_s |")


def test_the_dask_routes_table_is_written_as_parquet_parts(tmp_path, monkeypatch):
    from benchmarks import bench_audit

    monkeypatch.setattr(bench_audit, "PART_ROWS", 250)
    bench_audit.write_parts(600, tmp_path / "parts", seed=2)
    files = sorted((tmp_path / "parts").glob("*.parquet"))
    parts = [pd.read_parquet(file) for file in files]
    assert [len(part) for part in parts] == [250, 250, 100]
    assert {"sex", "income"} <= set(parts[0].columns)
    assert not pd.concat(parts).duplicated().any()
