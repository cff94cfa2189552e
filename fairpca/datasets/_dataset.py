"""The :class:`Dataset` container and the shared feature/sensitive-attribute split."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["Dataset", "SensitiveSpec", "assemble"]


@dataclass(frozen=True, repr=False, eq=False)
class Dataset:
    """Features, binary label and sensitive attribute(s) of one tabular dataset.

    Parameters
    ----------
    X : DataFrame
        Raw features, one row per sample: categorical columns as pandas ``category`` (or
        object/string) dtype, numeric columns as ``float64``. Not encoded or scaled; use
        :func:`fairpca.datasets.make_preprocessor` inside a pipeline for that.
    y : Series of int
        Binary label, 0/1 (``int64``); see ``positive_label`` for what 1 means.
    sensitive : DataFrame
        One column per sensitive attribute, aligned with ``X``, holding each row's group by
        name (``"Female"`` / ``"Male"``, ``"under 25"`` / ``"25 or older"``): metric names,
        reports and model cards show these names. See ``sensitive_encoding``.
    name : str
        Short dataset name, e.g. ``"adult"``.
    description : str
        One paragraph on source, rows kept and preprocessing choices.
    positive_label : str
        Meaning of ``y == 1``, e.g. ``"income >50K"``.
    sensitive_encoding : mapping of str to str
        For each sensitive column, how its values are coded.
    sensitive_labels : mapping of str to mapping
        For each derived sensitive attribute, its code in the paper and the name of the group
        it stands for (e.g. ``{"sex": {0: "Female", 1: "Male"}}``); empty for raw columns,
        whose values are their own names. See :attr:`sensitive_codes`.
    screened : mapping of str to str
        Columns of the source left out of ``X`` by the column screening, each with why.
    entities : Series or None
        The entity (a person, a firm) of each row when the rows are a panel with several rows
        per entity, aligned with ``X`` and not one of its columns; None: the rows are
        independent. A split that keeps each entity's rows together reads it.
    """

    X: pd.DataFrame
    y: pd.Series
    sensitive: pd.DataFrame
    name: str
    description: str
    positive_label: str
    sensitive_encoding: Mapping[str, str] = field(default_factory=dict)
    screened: Mapping[str, str] = field(default_factory=dict)
    sensitive_labels: Mapping[str, Mapping[Any, str]] = field(default_factory=dict)
    entities: pd.Series | None = None

    def __post_init__(self) -> None:
        n = len(self.X)
        if len(self.y) != n or len(self.sensitive) != n:
            raise ValueError(
                f"X, y and sensitive must have the same number of rows; got {n}, "
                f"{len(self.y)} and {len(self.sensitive)}."
            )
        if self.entities is not None and len(self.entities) != n:
            raise ValueError(
                f"entities must name the entity of each of the {n} rows; got {len(self.entities)}."
            )
        if not set(np.unique(self.y.to_numpy())) <= {0, 1}:
            raise ValueError("y must be coded 0/1; binarize the label before building a Dataset.")

    @property
    def sensitive_codes(self) -> pd.DataFrame:
        """The sensitive attributes with each derived one coded as in the paper (``int64``,
        e.g. sex 1 = Male, 0 = Female; see ``sensitive_encoding``); raw columns unchanged.

        The benchmarks that reproduce the paper's tables use these codes; everything that
        publishes a group (metrics, reports, cards) uses the names of :attr:`sensitive`.
        """
        coded = self.sensitive.copy()
        for column, labels in self.sensitive_labels.items():
            codes = {name: code for code, name in labels.items()} | {c: c for c in labels}
            coded[column] = coded[column].map(codes).astype("int64")
        return coded

    def with_named_groups(self) -> Dataset:
        """A copy whose sensitive columns hold group names wherever they hold a code of
        ``sensitive_labels`` (a :class:`Dataset` built by hand with coded groups); the
        loaders' datasets already hold names and are returned as they are."""
        named = self.sensitive.copy()
        changed = False
        for column, labels in self.sensitive_labels.items():
            if named[column].isin(list(labels)).any():
                names = dict(labels) | {name: name for name in labels.values()}
                named[column] = named[column].map(names).astype(object)
                changed = True
        return replace(self, sensitive=named) if changed else self

    @property
    def n_samples(self) -> int:
        """Number of rows."""
        return len(self.X)

    @property
    def positive_rate(self) -> float:
        """Fraction of rows with ``y == 1``."""
        return float(self.y.mean())

    def summary(self) -> dict[str, Any]:
        """Aggregate statistics, safe to log (no raw rows or per-person attributes).

        Returns
        -------
        summary : dict
            ``name``, ``n_samples``, ``n_features``, ``positive_label``, ``positive_rate`` and,
            under ``groups``, for each sensitive attribute and group label its ``count`` and
            ``positive_rate``.
        """
        groups = {}
        for column in self.sensitive.columns:
            grouped = self.y.groupby(self.sensitive[column].to_numpy(), observed=True)
            groups[column] = {
                str(label): {"count": len(rows), "positive_rate": float(rows.mean())}
                for label, rows in grouped
            }
        return {
            "name": self.name,
            "n_samples": self.n_samples,
            "n_features": self.X.shape[1],
            "positive_label": self.positive_label,
            "positive_rate": self.positive_rate,
            "groups": groups,
        }

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, n_samples={self.n_samples}, "
            f"n_features={self.X.shape[1]}, sensitive={list(self.sensitive.columns)}, "
            f"positive_label={self.positive_label!r})"
        )


@dataclass(frozen=True)
class SensitiveSpec:
    """How one named sensitive attribute is derived from the raw table.

    Parameters
    ----------
    source : str
        Raw column the attribute is computed from.
    encode : callable
        Maps the raw column (Series) to the attribute's values.
    encoding : str
        Human-readable coding, e.g. ``"1 = Male (privileged), 0 = Female"``.
    drop_source : bool, default=True
        Whether ``source`` is removed from the features when this attribute is selected.
    labels : mapping, default={}
        The name of each code, e.g. ``{0: "Female", 1: "Male"}``: the attribute holds these
        names (:attr:`Dataset.sensitive`), the codes are :attr:`Dataset.sensitive_codes`.
    """

    source: str
    encode: Callable[[pd.Series], pd.Series]
    encoding: str
    drop_source: bool = True
    labels: Mapping[Any, str] = field(default_factory=dict)


def binary(condition: Callable[[pd.Series], pd.Series]) -> Callable[[pd.Series], pd.Series]:
    """Wrap a boolean condition into an encoder returning 0/1 ``int64``."""
    return lambda column: condition(column).astype("int64")


def as_names(value: str | Sequence[str], what: str) -> tuple[str, ...]:
    """Normalize a column name or a sequence of names to a non-empty tuple of unique names."""
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names or not all(isinstance(name, str) for name in names):
        raise TypeError(f"{what} must be a column name or a non-empty list of column names.")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} lists a column twice: {list(names)}.")
    return names


def assemble(
    table: pd.DataFrame,
    *,
    features: Sequence[str],
    label: pd.Series,
    sensitive: str | Sequence[str],
    specs: Mapping[str, SensitiveSpec],
    drop: str | Sequence[str],
    name: str,
    description: str,
    positive_label: str,
) -> Dataset:
    """Split a parsed raw table into a :class:`Dataset`.

    A sensitive name listed in ``specs`` is derived as described there; any other name must be
    a raw column of ``table`` and is used as is (its values are the group labels). Raw
    columns used as sensitive attributes are removed from the features; derived ones remove
    their source column when ``drop_source`` is true. ``drop`` removes further features.

    Parameters
    ----------
    table : DataFrame
        Parsed raw rows (index 0..n-1).
    features : sequence of str
        Feature columns before removing sensitive and dropped ones.
    label : Series
        0/1 label aligned with ``table``.
    sensitive : str or sequence of str
        Sensitive attribute names.
    specs : mapping of str to SensitiveSpec
        Named, derived sensitive attributes of this dataset.
    drop : str or sequence of str
        Extra feature columns to remove.
    name, description, positive_label : str
        Passed to :class:`Dataset`.

    Returns
    -------
    dataset : Dataset
    """
    names = as_names(sensitive, "sensitive")
    extra = as_names(drop, "drop") if drop else ()
    columns, encodings, labels, removed = {}, {}, {}, set()
    for attribute in names:
        if attribute in specs:
            spec = specs[attribute]
            codes = spec.encode(table[spec.source])
            encodings[attribute] = spec.encoding
            columns[attribute] = codes
            if spec.labels:  # published by name; the paper's codes stay one call away
                labels[attribute] = dict(spec.labels)
                columns[attribute] = codes.map(dict(spec.labels)).astype(object)
            if spec.drop_source:
                removed.add(spec.source)
        elif attribute in features:
            columns[attribute] = table[attribute]
            encodings[attribute] = f"raw values of column {attribute!r}"
            removed.add(attribute)
        else:
            raise ValueError(
                f"Unknown sensitive attribute {attribute!r} for dataset {name!r}. Use one of the "
                f"derived attributes {sorted(specs)} or a feature column: {list(features)}."
            )
    unknown = [column for column in extra if column not in features]
    if unknown:
        raise ValueError(
            f"drop names columns that are not features of {name!r}: {unknown}. "
            f"Available: {list(features)}."
        )
    removed.update(extra)
    kept = [column for column in features if column not in removed]
    return Dataset(
        X=table[kept].reset_index(drop=True),
        y=label.reset_index(drop=True).astype("int64"),
        sensitive=pd.DataFrame(columns).reset_index(drop=True),
        name=name,
        description=description,
        positive_label=positive_label,
        sensitive_encoding=encodings,
        sensitive_labels=labels,
    )
