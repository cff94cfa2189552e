"""The audit's data source, read once per audit (fairpca.tasks.data)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fairpca.flows.config import AuditConfig
from fairpca.flows.preflight import check_before_run
from fairpca.tasks.data import load_data, preload_source, take_preloaded


def _user_file(path, n: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(rng.normal(size=(n, 4)), columns=[f"x{i}" for i in range(4)])
    frame["group"] = rng.choice(["a", "b"], size=n)
    frame["label"] = (frame["x0"] + rng.normal(size=n) > 0).astype(int)
    frame.to_csv(path, index=False)
    return path


@pytest.fixture
def config(tmp_path):
    path = _user_file(tmp_path / "people.csv")
    return AuditConfig(data=path, label="label", sensitive=["group"], output_dir=tmp_path / "out")


def test_the_flow_takes_the_dataset_the_preflight_loaded_once(config):
    kept = preload_source(config.source)
    assert load_data.fn(config.source) is kept  # not read again
    again = load_data.fn(config.source)  # a second audit of the same source reads it itself
    assert again is not kept
    pd.testing.assert_frame_equal(again.X, kept.X)


def test_check_before_run_keeps_what_it_loaded(config):
    check_before_run(config)
    kept = take_preloaded(config.source)
    assert kept is not None and len(kept.X) == 400
    assert take_preloaded(config.source) is None  # handed over once


def test_a_file_changed_after_the_preflight_is_read_again(config):
    preload_source(config.source)
    _user_file(config.source.data, n=300, seed=1)
    assert len(load_data.fn(config.source).X) == 300


def test_another_source_does_not_take_the_kept_dataset(config, tmp_path):
    kept = preload_source(config.source)
    other = config.source.model_copy(update={"data": _user_file(tmp_path / "other.csv", seed=2)})
    assert load_data.fn(other) is not kept
    assert take_preloaded(config.source.model_copy(update={"drop": ["x3"]})) is None
    assert take_preloaded(config.source) is kept
