"""Data tasks: load a dataset or a user file, and split it (seeded, stratified)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE
from sklearn.model_selection import train_test_split

from tasks.sources import load_source

__all__ = ["Split", "load_data", "load_source", "split_data", "split_rows"]


@dataclass(frozen=True)
class Split:
    """Training and evaluation rows: raw features, 0/1 labels, sensitive attribute frame."""

    X_train: pd.DataFrame
    y_train: np.ndarray
    s_train: pd.DataFrame
    X_eval: pd.DataFrame
    y_eval: np.ndarray
    s_eval: pd.DataFrame

    def summary(self) -> dict[str, Any]:
        """Aggregated sizes and rates only (safe to log)."""
        return {
            "n_train": len(self.X_train),
            "n_eval": len(self.X_eval),
            "n_features_raw": self.X_train.shape[1],
            "positive_rate_train": float(np.mean(self.y_train)),
            "positive_rate_eval": float(np.mean(self.y_eval)),
            "sensitive": list(self.s_train.columns),
        }


@task(name="load-data", cache_policy=NO_CACHE, retries=0)
def load_data(config) -> Any:
    """Load the audit's data source (bundled dataset, data directory or user file)."""
    return load_source(config)


def _strata(y: np.ndarray, sensitive: pd.DataFrame) -> np.ndarray:
    """Label x group strata; falls back to label only when a stratum has < 2 rows."""
    keys = pd.Series(y.astype(str))
    for column in sensitive.columns:
        keys = keys + "|" + sensitive[column].astype(str).to_numpy()
    counts = keys.value_counts()
    if counts.min() >= 2:
        return keys.to_numpy()
    return y


def split_rows(
    n_samples: int,
    y: np.ndarray,
    sensitive: pd.DataFrame,
    *,
    eval_fraction: float,
    max_train_rows: int | None,
    max_eval_rows: int | None,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the training and evaluation parts.

    Stratified by label and group, seeded; each part is capped at its maximum size by
    drawing rows at random (the 5,000 + 5,000 rows of Section 5.2 of the paper).
    """
    n_eval = round(eval_fraction * n_samples)
    if max_eval_rows is not None:
        n_eval = min(n_eval, max_eval_rows)
    n_train = n_samples - n_eval
    if max_train_rows is not None:
        n_train = min(n_train, max_train_rows)
    if n_eval < 2 or n_train < 2:
        raise ValueError(
            f"{n_samples} rows are too few to split into training and evaluation parts; "
            "pass more data or a larger eval_fraction."
        )
    train_idx, eval_idx = train_test_split(
        np.arange(n_samples),
        train_size=n_train,
        test_size=n_eval,
        stratify=_strata(np.asarray(y), sensitive),
        random_state=seed,
    )
    return np.sort(train_idx), np.sort(eval_idx)


@task(name="split-data", cache_policy=NO_CACHE)
def split_data(dataset, config) -> Split:
    """Seeded split stratified by label and sensitive group, capped as the config says."""
    y = np.asarray(dataset.y, dtype=np.int64)
    train_idx, eval_idx = split_rows(
        len(dataset.X),
        y,
        dataset.sensitive,
        eval_fraction=config.eval_fraction,
        max_train_rows=config.max_train_rows,
        max_eval_rows=config.max_eval_rows,
        seed=config.seed,
    )

    def rows(frame: pd.DataFrame, idx: np.ndarray) -> pd.DataFrame:
        return frame.iloc[idx].reset_index(drop=True)

    return Split(
        X_train=rows(dataset.X, train_idx),
        y_train=y[train_idx],
        s_train=rows(dataset.sensitive, train_idx),
        X_eval=rows(dataset.X, eval_idx),
        y_eval=y[eval_idx],
        s_eval=rows(dataset.sensitive, eval_idx),
    )
