"""The audit's data source (fairpca.tasks.data.load_source): what the preflight checks is what
the flow reads, with no dataset kept between them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fairpca.flows.config import AuditConfig
from fairpca.flows.preflight import check_before_run
from fairpca.tasks.data import load_source, load_split


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


def test_the_preflight_splits_the_rows_as_the_flow_does(config):
    _, checked = check_before_run(config)
    loaded = load_split.fn(
        config.source, config.split, seed=config.seed,
        min_group_size=config.evaluation.min_group_size,
    )  # fmt: skip
    for part in ("train", "validation", "test"):
        pd.testing.assert_frame_equal(getattr(loaded, f"X_{part}"), getattr(checked, f"X_{part}"))
        np.testing.assert_array_equal(getattr(loaded, f"y_{part}"), getattr(checked, f"y_{part}"))


def test_a_file_changed_after_the_preflight_is_read_as_it_is_now(config):
    check_before_run(config)
    _user_file(config.source.data, n=300, seed=1)
    assert len(load_source(config.source).X) == 300


def test_a_bundled_dataset_carries_its_group_names():
    dataset = load_source(AuditConfig(dataset="german").source)
    assert set(dataset.sensitive["age"]) == {"under 25", "25 or older"}


@pytest.mark.parametrize("limit", ["100kB", "20kB"])
def test_a_table_that_would_not_fit_names_the_dask_route(config, monkeypatch, limit):
    """20kB: the file itself would not fit (refused before reading); 100kB: the file does,
    the audit's working set of its rows does not."""
    from fairpca import InsufficientMemoryError
    from fairpca.flows.preflight import PreflightError

    monkeypatch.setenv("FAIRPCA_MEMORY_LIMIT", limit)
    with pytest.raises(PreflightError) as caught:
        check_before_run(config)
    assert isinstance(caught.value.__cause__, InsufficientMemoryError)
    assert "--dask-address" in str(caught.value) and "--n-train" in str(caught.value)


def test_the_flow_takes_the_split_the_preflight_made_once(config):
    """One read and one screening of the data per command: inside ``handed_over`` the flow's
    ``load_split`` takes the pre-flight's split (not a later state of the file), once."""
    from fairpca.tasks.data import handed_over

    def flow_split(seed: int):
        return load_split.fn(
            config.source, config.split, seed=seed,
            min_group_size=config.evaluation.min_group_size,
        )  # fmt: skip

    _, split = check_before_run(config)
    with handed_over(split, config):
        _user_file(config.source.data, n=300, seed=1)
        assert len(flow_split(config.seed + 1).y_train) == 150  # another split: read anew
        assert flow_split(config.seed) is split
        assert len(flow_split(config.seed).y_train) == 150  # handed over once
    assert len(split.y_train) == 200


def test_a_column_excluded_on_the_training_rows_is_logged_with_its_reason(
    tmp_path, monkeypatch, caplog
):
    """A team's flow that calls ``load_split`` sees which column was dropped and why."""
    import logging

    import fairpca.tasks.data as data

    frame = pd.read_csv(_user_file(tmp_path / "leaky.csv"))
    frame["leak"] = frame["label"] * 2.0 - 1.0
    frame.to_csv(tmp_path / "leaky.csv", index=False)
    config = AuditConfig(data=tmp_path / "leaky.csv", label="label", sensitive=["group"])
    monkeypatch.setattr(data, "get_run_logger", lambda: logging.getLogger("fairpca.test"))
    with caplog.at_level(logging.INFO, logger="fairpca.test"), pytest.warns(UserWarning):
        split = load_split.fn(config.source, config.split, seed=0, min_group_size=30)
    assert list(split.leaking) == ["leak"]
    assert caplog.messages == [
        f"columns excluded on the training rows: 'leak': {split.leaking['leak']}"
    ]
