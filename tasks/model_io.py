"""What the logged model carries besides its weights, and where the audit may write.

- :func:`input_example`: the model's example input, synthetic for real: per-column medians
  and quartiles of numeric columns, and for categoricals only categories that occur in at
  least ``min_category_count`` rows (else a placeholder the encoder treats as unseen), so no
  single person's value is ever logged.
- :func:`model_signature`: the input schema, which accepts what the project's loaders return
  (pandas categoricals) and the same columns read from a CSV (plain strings).
- :func:`path_inside`: every written path resolves inside its base directory.

That a saved model is the one the audit wrote is the seal's job (:mod:`fairpca.tasks.signing`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from fairpca.datasets import MIN_CATEGORY_COUNT, RARE_CATEGORY

__all__ = [
    "PLACEHOLDER_CATEGORY",
    "as_model_input",
    "input_example",
    "model_signature",
    "path_inside",
]

PLACEHOLDER_CATEGORY = RARE_CATEGORY  # the pooled bucket of rare categories


def input_example(
    X_train: pd.DataFrame, min_category_count: int = MIN_CATEGORY_COUNT
) -> pd.DataFrame:
    """Two synthetic rows built from aggregates only.

    Numeric columns: the median and the lower quartile, rounded to 3 significant digits
    (the median of an odd number of distinct values is one row's value). Categorical
    columns: the most frequent and the second most frequent category if they occur in at
    least ``min_category_count`` rows (the categories the encoder keeps), otherwise
    :data:`PLACEHOLDER_CATEGORY`. No raw row and no sensitive attribute is used (sensitive
    columns are not features).
    """
    rows: list[dict[str, Any]] = [{}, {}]
    for column in X_train.columns:
        values = X_train[column]
        if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
            rows[0][column] = _rounded(values.median())
            rows[1][column] = _rounded(values.quantile(0.25))
            continue
        counts = values.astype(str).value_counts()
        common = [str(value) for value, n in counts.items() if n >= min_category_count][:2]
        common += [PLACEHOLDER_CATEGORY] * (2 - len(common))
        rows[0][column], rows[1][column] = common
    return pd.DataFrame(rows, columns=list(X_train.columns))


def _rounded(value: float) -> float:
    return float(f"{value:.3g}")


def as_model_input(X: pd.DataFrame) -> pd.DataFrame:
    """Categorical columns as plain strings (the model's input schema)."""
    out = X.copy()
    for column in out.columns:
        if not pd.api.types.is_numeric_dtype(out[column]) or pd.api.types.is_bool_dtype(
            out[column]
        ):
            out[column] = out[column].astype(str)
    return out


def path_inside(base: str | Path, *parts: str) -> Path:
    """``base / parts...``, refused unless it resolves inside ``base`` (no ``..``, no
    absolute part, no symlink out of it)."""
    root = Path(base).resolve()
    target = root.joinpath(*parts).resolve()
    if target == root or not target.is_relative_to(root):
        raise ValueError(
            f"path {'/'.join(parts)!r} would be written outside {root} (it resolves to "
            f"{target}); use a plain name without '/', '..' or an absolute path."
        )
    return target


def _is_numeric(values: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)


def model_signature(example: pd.DataFrame, predictions):
    """The model signature: numeric columns as ``double``, the others as ``Any``.

    A categorical column is typed ``Any`` rather than ``string``: MLflow's schema check
    refuses a pandas ``category`` column for ``string`` ("Can not safely convert category
    to <U0"), while the project's loaders return categoricals and a CSV gives strings; the
    fitted encoder accepts both. Built from the synthetic ``example`` only.
    """
    from mlflow.models import ModelSignature, infer_signature
    from mlflow.types import ColSpec, DataType, Schema
    from mlflow.types.schema import AnyType

    columns = [
        ColSpec(DataType.double if _is_numeric(example[name]) else AnyType(), name)
        for name in example.columns
    ]
    outputs = infer_signature(example, predictions).outputs
    return ModelSignature(inputs=Schema(columns), outputs=outputs)
