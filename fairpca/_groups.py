"""Validation and encoding of sensitive attributes.

A sensitive attribute is any 1-D array-like of hashable labels (strings, ints, bools, pandas
categoricals). Several attributes are given as a 2-D array or a DataFrame, one column each.
Fair PCA needs, per attribute, the one-hot group indicators; Section 3.4 of the paper centres
them (the paper's matrix Z, the centred group-indicator matrix) and Section 3.5 stacks the
matrices of several attributes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

MIN_ROWS_PER_GROUP = 2


@dataclass(frozen=True)
class GroupEncoding:
    """Integer codes of the groups of each sensitive attribute.

    Attributes
    ----------
    codes : ndarray of shape (n_samples, n_attributes), dtype intp
        ``codes[i, a]`` is the index of row ``i``'s group in ``groups[a]``.
    groups : list of ndarray
        For each attribute, its group labels in a deterministic order (sorted when the labels
        are sortable, else in order of first appearance).
    names : list of str
        A name per attribute (DataFrame/Series names, else ``"sensitive_<a>"``).
    """

    codes: np.ndarray
    groups: list
    names: list

    @property
    def n_attributes(self) -> int:
        return self.codes.shape[1]

    @functools.cached_property
    def counts(self) -> list[np.ndarray]:
        """Rows per group of each attribute (int64), counted once."""
        return [
            np.bincount(self.codes[:, a], minlength=len(labels))
            for a, labels in enumerate(self.groups)
        ]

    def indicator(self, attribute: int) -> np.ndarray:
        """Dense one-hot matrix (n_samples, n_groups) of one attribute, float64."""
        n_groups = len(self.groups[attribute])
        onehot = np.zeros((self.codes.shape[0], n_groups))
        onehot[np.arange(self.codes.shape[0]), self.codes[:, attribute]] = 1.0
        return onehot

    def subset(self, mask: np.ndarray) -> GroupEncoding:
        """Encoding restricted to the rows in ``mask``; groups absent there are dropped."""
        codes = self.codes[mask]
        new_codes = np.empty_like(codes)
        groups = []
        for a in range(self.n_attributes):
            present, inverse = np.unique(codes[:, a], return_inverse=True)
            new_codes[:, a] = inverse
            groups.append(self.groups[a][present])
        return GroupEncoding(new_codes, groups, list(self.names))


def group_sum_weights(
    codes: np.ndarray, sizes, rows: np.ndarray | None = None, *, total: bool = True
) -> np.ndarray:
    """Weights ``W = [1 | one-hot of each attribute, zero outside rows]``, n x (1 + sum m_a).

    One product ``X^T W`` gives the column sums of all rows and, per group of every
    attribute, the column sums of its rows among ``rows`` (all rows when None): the columns
    of ``X^T G`` up to the centring of the indicators (Sections 3.4-3.5). ``total=False``
    leaves out the column of ones (see :func:`with_total`).
    """
    n = codes.shape[0]
    start = 1 if total else 0
    width = start + sum(sizes)
    W = np.zeros((n, width))
    if total:
        W[:, 0] = 1.0
    flat = W.reshape(-1)  # row-major: entry (i, j) is flat[i * width + j]
    if rows is None:
        kept, offsets = None, np.arange(0, n * width, width)
    else:
        kept = np.flatnonzero(rows)
        offsets = kept * width
    for a, size in enumerate(sizes):
        column = codes[:, a] if rows is None else codes[kept, a]
        flat[offsets + (start + column)] = 1.0
        start += size
    return W


def with_total(group_sums: np.ndarray, sizes) -> np.ndarray:
    """``X^T W`` of :func:`group_sum_weights` from ``X^T W`` without its column of ones.

    When every row is counted, the groups of an attribute partition the rows, so the
    column sums of its groups add up to those of all rows (the identity behind
    ``sum_g n_g (mu_g - mu) = 0``, Section 3.4): the pass over ``X`` needs one column less,
    which on narrow data is a sixth of a covariance fit's time.
    """
    out = np.empty((group_sums.shape[0], 1 + group_sums.shape[1]))
    out[:, 1:] = group_sums
    np.sum(group_sums[:, : sizes[0]], axis=1, out=out[:, 0])
    return out


def _as_columns(sensitive_features) -> tuple[list, list]:
    """Split 1-D or 2-D input into a list of 1-D columns with names."""
    if isinstance(sensitive_features, pd.DataFrame):
        names = [str(c) for c in sensitive_features.columns]
        return [sensitive_features[c] for c in sensitive_features.columns], names
    if isinstance(sensitive_features, pd.Series):
        name = str(sensitive_features.name) if sensitive_features.name is not None else None
        return [sensitive_features], [name or "sensitive_0"]
    if isinstance(sensitive_features, pd.Categorical):
        return [pd.Series(sensitive_features)], ["sensitive_0"]
    if isinstance(sensitive_features, str | bytes) or np.isscalar(sensitive_features):
        raise TypeError(
            "sensitive_features must be array-like with one label per row (1-D), or a 2-D "
            "array / DataFrame with one column per attribute; got the scalar "
            f"{sensitive_features!r}."
        )
    array = np.asarray(sensitive_features)
    if array.dtype.kind not in "biuUS":
        array = np.asarray(sensitive_features, dtype=object)
    if array.ndim == 1:
        return [array], ["sensitive_0"]
    if array.ndim == 2:
        return [array[:, a] for a in range(array.shape[1])], [
            f"sensitive_{a}" for a in range(array.shape[1])
        ]
    raise ValueError(
        f"sensitive_features must be 1-D or 2-D; got an array with {array.ndim} dimensions."
    )


def _factorize_small_ints(array: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """O(n) factorisation of integer/bool labels spanning a small range (sorted labels)."""
    if array.dtype.kind not in "biu" or array.size == 0:
        return None
    low, high = int(array.min()), int(array.max())
    if high - low > 1_000_000:
        return None
    offset = array.astype(np.intp)
    if low:
        offset -= low
    present = np.flatnonzero(np.bincount(offset))
    labels = np.asarray((present + low).astype(array.dtype).tolist(), dtype=object)
    if present.size == high - low + 1:  # every value in the range occurs: the offsets are codes
        return offset, labels
    lookup = np.empty(high - low + 1, dtype=np.intp)
    lookup[present] = np.arange(present.size)
    return lookup[offset], labels


def _factorize(column, name: str) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(column, np.ndarray):
        fast = _factorize_small_ints(column)
        if fast is not None:
            return fast
    series = column if isinstance(column, pd.Series) else pd.Series(column, dtype=object)
    if series.isna().any():
        raise ValueError(
            f"sensitive attribute {name!r} has {int(series.isna().sum())} missing value(s); "
            "fill them with an explicit group label (e.g. 'unknown') or drop those rows."
        )
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.cat.remove_unused_categories()
        codes = series.cat.codes.to_numpy().astype(np.intp)
        return codes, np.asarray(series.cat.categories, dtype=object)
    try:
        codes, uniques = pd.factorize(series, sort=True)
    except TypeError:  # labels of mixed, unorderable types
        codes, uniques = pd.factorize(series, sort=False)
    return codes.astype(np.intp), np.asarray(uniques, dtype=object)


def encode_labels(
    sensitive_features, n_samples: int, *, method: str = "fit"
) -> tuple[GroupEncoding, list]:
    """Encode sensitive attributes row by row, without checks that need all the rows.

    Used directly for a chunk of ``partial_fit`` (a group may be absent from a chunk), and by
    :func:`encode_groups`, which adds the whole-data checks.

    Parameters
    ----------
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels of any hashable type, or a DataFrame with one column per attribute.
    n_samples : int
        Number of rows of ``X`` the labels must align with.
    method : str, default="fit"
        Name of the calling method, for the error messages.

    Returns
    -------
    encoding : GroupEncoding
    categories : list
        Per attribute, the full category list of a categorical column (else None).
    """
    if sensitive_features is None:
        raise ValueError(
            f"sensitive_features is required: pass {method}(X, sensitive_features=groups) "
            "with one group label per row, or name the sensitive columns of a DataFrame X "
            "with sensitive_columns=[...]."
        )
    columns, names = _as_columns(sensitive_features)
    if not columns:
        raise ValueError("sensitive_features has no columns; give at least one attribute.")
    codes = np.empty((n_samples, len(columns)), dtype=np.intp)
    groups, categories = [], []
    for a, (column, name) in enumerate(zip(columns, names, strict=True)):
        if len(column) != n_samples:
            raise ValueError(
                f"sensitive_features has {len(column)} rows but X has {n_samples}; pass one "
                "group label per row of X."
            )
        codes[:, a], labels = _factorize(column, name)
        groups.append(labels)
        dtype = getattr(column, "dtype", None)
        categories.append(
            list(dtype.categories) if isinstance(dtype, pd.CategoricalDtype) else None
        )
    return GroupEncoding(codes, groups, names), categories


def encode_groups(
    sensitive_features, n_samples: int, *, min_rows: int = MIN_ROWS_PER_GROUP
) -> GroupEncoding:
    """Validate sensitive attributes and encode their groups as integer codes.

    Parameters
    ----------
    sensitive_features : array-like of shape (n_samples,) or (n_samples, n_attributes)
        Group labels of any hashable type, or a DataFrame with one column per attribute.
    n_samples : int
        Number of rows of ``X`` the labels must align with.
    min_rows : int, default=2
        Smallest number of rows a group may have.

    Returns
    -------
    GroupEncoding

    Raises
    ------
    ValueError
        On a length mismatch, missing labels, an attribute with a single group or a group with
        fewer than ``min_rows`` rows.
    """
    encoding, _ = encode_labels(sensitive_features, n_samples)
    check_group_sizes(encoding.names, encoding.groups, encoding.counts, min_rows=min_rows)
    return encoding


def check_group_sizes(
    names,
    groups,
    counts,
    *,
    rows: str = "rows",
    min_rows: int = MIN_ROWS_PER_GROUP,
    error: type[ValueError] = ValueError,
    prefix: str = "",
    fix: str = "Merge rare groups or collect more rows.",
) -> None:
    """Raise ``error`` when an attribute has a single group, or a group with fewer than
    ``min_rows`` of the counted rows.

    Parameters
    ----------
    names, groups, counts : sequences, one entry per sensitive attribute
        The attribute's name, its group labels and the number of counted rows per group.
    rows : str
        What was counted, for the message (``"rows"``, ``"rows so far"``, ``"rows with
        y == pos_label"``).
    error : ValueError subclass
        The exception raised.
    prefix, fix : str
        Text before the message (the setting that applies) and after it (what to do; may be
        empty).
    """
    for name, labels, count in zip(names, groups, counts, strict=True):
        if len(labels) < 2:
            raise error(
                f"{prefix}sensitive attribute {name!r} has a single group ({labels[0]!r}) "
                f"among the {rows}; fair PCA needs at least two groups to compare. Check the "
                "column, or drop it from sensitive_features."
            )
        count = np.asarray(count)
        if count.size and count.min() >= min_rows:
            continue
        # By count, never by label: a message is logged and kept (a failed Prefect run
        # pickles its exception), and the label of a group this small points at a person.
        sizes = sorted(int(c) for c in count[count < min_rows])
        if sizes:
            raise error(
                f"{prefix}sensitive attribute {name!r}: {len(sizes)} group(s) have fewer "
                f"than {min_rows} {rows} (sizes {sizes}; not named, list them with "
                "pandas.Series(column).value_counts()); a group mean (and covariance) needs "
                f"at least {min_rows}. {fix}".rstrip()
            )


def numbered_groups(sensitive_features) -> pd.DataFrame:
    """The sensitive attributes with every group label replaced by the group's number.

    Per attribute, the groups are numbered 1, 2, ... in order of first appearance, so the
    partition of the rows, and with it every fit that reads the groups only through their
    indicators (fair PCA's constraints, Sections 3.4-3.5), is unchanged, while an estimator
    fitted on them stores numbers in ``groups_``, not labels. The numbering follows the row
    order, not the labels, so it tells nothing of a label (e.g. of a group too small to be
    published) that the rows do not.

    Parameters
    ----------
    sensitive_features : array-like of shape (n_samples,), 2-D array or DataFrame
        Group labels: one attribute, or one column per attribute.

    Returns
    -------
    DataFrame of int64, one column per attribute (named as by :func:`encode_labels`).

    Examples
    --------
    >>> numbered_groups(pd.DataFrame({"sex": ["M", "F", "M"]}))["sex"].tolist()
    [1, 2, 1]
    """
    columns, names = _as_columns(sensitive_features)
    numbered = {}
    for column, name in zip(columns, names, strict=True):
        codes, _ = pd.factorize(pd.Series(np.asarray(column, dtype=object)), sort=False)
        if (codes < 0).any():
            raise ValueError(
                f"sensitive attribute {name!r} has {int((codes < 0).sum())} missing value(s); "
                "fill them with an explicit group label (e.g. 'unknown') or drop those rows."
            )
        numbered[name] = codes.astype(np.int64) + 1
    return pd.DataFrame(numbered)
