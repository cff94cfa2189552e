"""Column screening: which columns of a user's table must not become features.

A table as users have it holds columns that a fairness audit must not encode: identifiers
(a row id, a name, a case number), free text, dates and timestamps, and categoricals with so
many values that one-hot encoding would explode the width. Encoding them would put personal
values into the fitted encoder (and from there into a logged model) and, for wide one-hot
blocks, make the d x d statistics of fair PCA unaffordable. A column that alone predicts the
label almost perfectly (e.g. a later outcome recorded next to the label) is target leakage:
an audit with it measures nothing. :func:`screen_columns` finds all of them.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ._limits import LEAKAGE_BALANCED_ACCURACY, MIN_CATEGORY_COUNT, PROXY_BALANCED_ACCURACY

__all__ = [
    "MIN_CATEGORY_COUNT",
    "RARE_CATEGORY",
    "ColumnScreening",
    "NumericTextWarning",
    "ScreeningWarning",
    "balanced_accuracy_alone",
    "leakage_scores",
    "leaking_columns",
    "panel_id_columns",
    "proxy_columns",
    "screen_columns",
    "warn_screened",
]

UNIQUE_FRACTION = 0.5  # text columns with at least this share of distinct values are ids
NUMERIC_UNIQUE_FRACTION = 0.95  # integer columns distinct on (almost) every row are ids
RARE_CATEGORY = "<rare>"  # the one value that replaces every rare or unseen category
MAX_CATEGORIES = 100  # categoricals with more distinct values would explode the one-hot width
TEXT_MIN_WORDS = 4.0  # mean words per value from which a high-cardinality column is free text
RARE_CATEGORY_ROWS = 10  # rarer categories are pooled in the leakage rule (no overfitting)
_DATE = re.compile(
    r"^\s*(\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4})"
    r"([ T]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?)?\s*(Z|[+-]\d{2}:?\d{2})?\s*$"
)
_SAMPLE = 500


class ScreeningWarning(UserWarning):
    """Columns were excluded from the features (identifiers, text, dates, leakage)."""


class NumericTextWarning(ScreeningWarning):
    """A column of numbers holds text in some rows, so it is read as categorical: each number
    becomes a category of its own instead of a value."""


@dataclass(frozen=True)
class ColumnScreening:
    """Outcome of :func:`screen_columns`.

    Attributes
    ----------
    kept : list of str
        Feature columns to use, in table order.
    excluded : dict of str to str
        Each excluded column and why (the reason names the rule and the measured value).
    """

    kept: list[str]
    excluded: dict[str, str] = field(default_factory=dict)
    numbers_with_text: dict[str, str] = field(default_factory=dict)

    def message(self) -> str:
        """One line per excluded column, for the warning and the report."""
        lines = [f"{name!r}: {why}" for name, why in self.excluded.items()]
        return (
            f"{len(self.excluded)} column(s) excluded from the features: "
            + "; ".join(lines)
            + ". Pass keep=[...] (CLI --keep NAME) to use one anyway, drop=[...] (--drop) to "
            "exclude more."
        )


def _numbers_with_text(values: pd.Series) -> str | None:
    """For a text column whose values are mostly numbers (over every row, not a sample), how
    many rows hold text instead; None otherwise. Counts only: a text value may be personal."""
    if _is_number(values) or pd.api.types.is_bool_dtype(values):
        return None
    present = values.dropna()
    if not len(present) or pd.to_numeric(_sample(present), errors="coerce").isna().mean() > 0.5:
        return None
    text = present[pd.to_numeric(present, errors="coerce").isna()]
    if not len(text) or len(text) > len(present) / 2:
        return None
    counts = text.astype(str).value_counts()
    return (
        f"numbers in {len(present) - len(text)} rows and text in {len(text)} rows "
        f"({len(counts)} distinct text value(s), the most frequent in {int(counts.iloc[0])} rows; "
        "not shown), so it is read as categorical and each number becomes a category of its "
        "own. Clean those cells (leave them empty: missing values are imputed), or exclude the "
        "column with drop=[...] (CLI --drop NAME)"
    )


def _is_number(values: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)


def _sample(values: pd.Series) -> pd.Series:
    present = values.dropna()
    return present.iloc[:: max(1, len(present) // _SAMPLE)] if len(present) else present


EMPTY = "empty: no values"  # imputed, it would be a constant feature


def _kind_reason(values: pd.Series, max_categories: int) -> str | None:
    """Why a column is no feature (empty, date, identifier, text, too many categories) or
    None."""
    if pd.api.types.is_datetime64_any_dtype(values) or pd.api.types.is_timedelta64_dtype(values):
        return "date/time values"
    present = values.dropna()
    if len(present) == 0:
        return EMPTY
    if pd.api.types.is_bool_dtype(values):
        return None
    n_distinct = present.nunique()
    fraction = n_distinct / len(present)
    if _is_number(values):
        integer = pd.api.types.is_integer_dtype(values) or bool(
            np.all(np.mod(present.to_numpy(dtype=np.float64), 1.0) == 0.0)
        )
        if integer and len(present) >= 20 and fraction >= NUMERIC_UNIQUE_FRACTION:
            return f"identifier-like: integer values distinct on {fraction:.0%} of the rows"
        return None
    text = _sample(values).astype(str)
    if len(text) and text.str.match(_DATE).mean() >= 0.9:
        return "date/time values"
    words = float(text.str.split().str.len().mean()) if len(text) else 0.0
    if n_distinct > max_categories and words >= TEXT_MIN_WORDS:
        return f"free text: {n_distinct} distinct values of {words:.1f} words on average"
    if len(present) >= 20 and fraction >= UNIQUE_FRACTION:
        return f"identifier-like: {n_distinct} distinct values in {len(present)} rows"
    if n_distinct > max_categories:
        return (
            f"{n_distinct} distinct categories (more than {max_categories}) would explode the "
            "one-hot width"
        )
    return None


# Columns of float64 screened at once are taken in blocks of about this many values (a
# block is copied and sorted): the identifier rule over a 10,000-column table at numpy's speed,
# with memory bounded on a tall one.
_FLOAT_BLOCK_VALUES = 4_000_000


def _float_identifiers(X: pd.DataFrame, columns: Sequence[str]) -> dict[str, str]:
    """:func:`_kind_reason` of the float64 ``columns`` of ``X``, vectorised: a column whose
    present values are all integers, at least 20 of them, distinct on at least
    :data:`NUMERIC_UNIQUE_FRACTION` of them, is identifier-like. Distinct values are counted
    by sorting each column (missing values sort last)."""
    reasons = {}
    block = max(1, _FLOAT_BLOCK_VALUES // max(1, len(X)))
    for start in range(0, len(columns), block):
        names = list(columns[start : start + block])
        values = np.sort(X[names].to_numpy(dtype=np.float64), axis=0)
        present = (~np.isnan(values)).sum(axis=0)
        integer = np.all(np.isnan(values) | (np.mod(values, 1.0) == 0.0), axis=0)
        inside = np.arange(1, len(values))[:, None] < present[None, :]
        distinct = ((values[1:] != values[:-1]) & inside).sum(axis=0) + (present > 0)
        fraction = distinct / np.maximum(present, 1)
        flagged = integer & (present >= 20) & (fraction >= NUMERIC_UNIQUE_FRACTION)
        for name, share in zip(np.asarray(names)[flagged], fraction[flagged], strict=True):
            reasons[name] = f"identifier-like: integer values distinct on {share:.0%} of the rows"
        reasons |= dict.fromkeys(np.asarray(names)[present == 0], EMPTY)
    return reasons


def balanced_accuracy_alone(values: pd.Series, y: np.ndarray) -> float:
    """Best balanced accuracy of a rule that sees only this column.

    Numeric columns: the best threshold rule, either direction, with missing values placed
    below or above every value (missingness itself can leak). Categorical columns: each
    category (missing being one; those with fewer than 10 rows pooled into one, so a rare
    value cannot "predict" its few rows) predicts the class it is relatively more frequent
    in, which maximizes ``(TPR + TNR) / 2 = (1/2) * sum_c max(P(c | y=1), P(c | y=0))``.
    """
    y = np.asarray(y, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return 0.5
    if _is_number(values):
        raw = values.to_numpy(dtype=np.float64)
        best = 0.5
        for fill in (-np.inf, np.inf):
            x = np.where(np.isnan(raw), fill, raw)
            order = np.argsort(x, kind="stable")
            xs, ys = x[order], y[order]
            last = np.r_[xs[1:] != xs[:-1], True]  # thresholds between distinct values
            tpr_below = np.cumsum(ys)[last] / n_pos
            tnr_below = np.cumsum(~ys)[last] / n_neg
            # "positive above the threshold": TPR = 1 - tpr_below, TNR = tnr_below
            score = 0.5 * (1.0 - tpr_below + tnr_below)
            best = max(best, float(score.max()), float((1.0 - score).max()))
        return best
    codes = values.astype(object).where(values.notna(), "<missing>").astype(str)
    counts = codes.map(codes.value_counts())
    codes = codes.where(counts >= RARE_CATEGORY_ROWS, "<rare>")
    table = pd.crosstab(codes, y)
    pos = table.get(True, pd.Series(0, index=table.index)) / n_pos
    neg = table.get(False, pd.Series(0, index=table.index)) / n_neg
    return float(0.5 * np.maximum(pos, neg).sum())


def screen_columns(
    X: pd.DataFrame,
    y: np.ndarray | pd.Series | None = None,
    *,
    keep: Sequence[str] = (),
    drop: Sequence[str] = (),
    max_categories: int = MAX_CATEGORIES,
    leakage_threshold: float = LEAKAGE_BALANCED_ACCURACY,
) -> ColumnScreening:
    """Decide which columns of ``X`` may be features.

    Excluded are: the ``drop`` columns; empty columns (no value); dates and timestamps
    (datetime dtype, or text in which at least 90% of values look like dates); identifier-like
    columns (text distinct on at least half of the rows, or integers distinct on at least
    95%); free text (more than ``max_categories`` values of 4+ words on average); categoricals
    with more than ``max_categories`` values; and, when ``y`` is given, target leakage: a
    column whose best single-column rule reaches a balanced accuracy of ``leakage_threshold``
    (see :func:`balanced_accuracy_alone`). Columns in ``keep`` are never screened out. A kept text
    column whose values are mostly numbers is listed in ``numbers_with_text`` with how many
    rows hold text (over every row; :func:`warn_screened` warns with a
    :class:`NumericTextWarning`).

    Parameters
    ----------
    X : DataFrame
        Candidate feature columns.
    y : array-like of 0/1, default=None
        Binary label aligned with ``X``, for the leakage rule.
    keep, drop : sequence of str, default=()
        Columns to keep whatever the rules say, and columns to exclude.
    max_categories : int, default=100
        Most distinct values a categorical column may have.
    leakage_threshold : float, default=0.8
        Balanced accuracy from which one column is treated as leaking the label.

    Returns
    -------
    screening : ColumnScreening
        ``kept`` columns and the ``excluded`` ones with their reasons.
    """
    unknown = [name for name in (*keep, *drop) if name not in X.columns]
    if unknown:
        raise ValueError(
            f"keep/drop name column(s) {unknown} that are not feature columns; the features "
            f"are {list(X.columns)}."
        )
    both = sorted(set(keep) & set(drop))
    if both:
        raise ValueError(f"Column(s) {both} are in both keep and drop; give each in one only.")
    excluded: dict[str, str] = {name: "dropped on request" for name in drop}
    dtypes = dict(X.dtypes.items())
    screened = [column for column in X.columns if column not in excluded and column not in keep]
    floats = [column for column in screened if dtypes[column] == np.float64]
    found = _float_identifiers(X, floats)
    floats = set(floats)
    for column in screened:
        reason = found.get(column) if column in floats else _kind_reason(X[column], max_categories)
        if reason is not None:
            excluded[column] = reason
    if y is not None:
        candidates = X[[column for column in X.columns if column not in excluded]]
        excluded |= leaking_columns(candidates, y, keep=keep, threshold=leakage_threshold)
    kept = [column for column in X.columns if column not in excluded]
    mixed = {column: _numbers_with_text(X[column]) for column in kept if column not in floats}
    mixed = {column: why for column, why in mixed.items() if why is not None}
    return ColumnScreening(kept=kept, excluded=excluded, numbers_with_text=mixed)


def leakage_scores(X: pd.DataFrame, y: np.ndarray | pd.Series) -> dict[str, float]:
    """Each column's :func:`balanced_accuracy_alone` for the label ``y``."""
    return {column: balanced_accuracy_alone(X[column], np.asarray(y)) for column in X.columns}


def leaking_columns(
    X: pd.DataFrame,
    y: np.ndarray | pd.Series,
    *,
    keep: Sequence[str] = (),
    threshold: float = LEAKAGE_BALANCED_ACCURACY,
) -> dict[str, str]:
    """Columns of ``X`` (except ``keep``) that alone predict ``y`` with a balanced accuracy of
    at least ``threshold`` (:func:`balanced_accuracy_alone`), with the reason.

    An audit applies this rule to its training rows only, so that no label of its validation
    or test rows influences which features exist.
    """
    candidates = X[[column for column in X.columns if column not in keep]]
    return {
        column: f"likely target leakage: alone it predicts the label with balanced "
        f"accuracy {score:.3f} (>= {threshold})"
        for column, score in leakage_scores(candidates, y).items()
        if score >= threshold
    }


def _proxy_of(values: pd.Series, attribute: pd.Series, min_rows: int) -> tuple[str, float]:
    """``(rule, score)`` of one column against one sensitive attribute: ``duplicate`` or
    ``recoding`` (score 1), else ``predicts`` with the best one-group-versus-rest balanced
    accuracy of a rule that sees only the column, over groups of at least ``min_rows`` rows
    (a threshold can isolate a group of one row by chance)."""
    text, groups = values.astype(str).to_numpy(), attribute.astype(str).to_numpy()
    if np.array_equal(text, groups):
        return "duplicate", 1.0
    pairs = pd.DataFrame({"value": text, "group": groups}).drop_duplicates()
    if pairs["value"].is_unique and pairs["group"].is_unique:
        return "recoding", 1.0
    labels, counts = np.unique(groups, return_counts=True)
    two = len(labels) == 2
    labels = labels[counts >= min_rows]
    # one group versus the rest; with two groups both directions give the same score
    score = max(
        (
            balanced_accuracy_alone(values, groups == group)
            for group in (labels[:1] if two else labels)
        ),
        default=0.5,
    )
    return "predicts", float(score)


def proxy_columns(
    X: pd.DataFrame,
    sensitive: pd.DataFrame,
    *,
    threshold: float = PROXY_BALANCED_ACCURACY,
    min_rows: int = 30,
) -> dict[str, tuple[str, float, str]]:
    """Columns of ``X`` that stand in for a sensitive attribute: a duplicate of it, an exact
    recoding (a one-to-one relabelling of its groups), or a column that alone identifies one
    of its groups (of at least ``min_rows`` rows) with a balanced accuracy of at least
    ``threshold``.

    Returns ``{column: (rule, score, reason)}`` with the attribute named in the rule, e.g.
    ``("recoding of sex", 1.0, "...")``. Fair PCA constrains group means linearly, so such a
    column lets a non-linear model read the attribute back from the representation.
    """
    found: dict[str, tuple[str, float, str]] = {}
    for column in X.columns:
        for attribute in sensitive.columns:
            values = X[column].reset_index(drop=True)
            rule, score = _proxy_of(values, sensitive[attribute].reset_index(drop=True), min_rows)
            if rule == "predicts" and score < threshold:
                continue
            words = {
                "duplicate": f"a duplicate of the sensitive attribute {attribute!r}",
                "recoding": f"an exact recoding of the sensitive attribute {attribute!r}",
                "predicts": f"alone it predicts the sensitive attribute {attribute!r} with "
                f"balanced accuracy {score:.3f} (>= {threshold})",
            }
            name = f"predicts {attribute}" if rule == "predicts" else f"{rule} of {attribute}"
            found[column] = (name, score, f"proxy: {words[rule]}")
            break
    return found


# A panel's entity id: at least this many entities, each in two to PANEL_MAX_ROWS rows on the
# median (a panel's periods: 8 years, 24 months; a value in hundreds of rows is a category or
# a measure), none in more than PANEL_MAX_SHARE of the rows; and another column constant
# within nearly every entity (PANEL_CONSTANT_SHARE of those with several rows: a person's
# schooling, race, a firm's sector) where chance alone would make it so for at most
# PANEL_CHANCE_SHARE. A measure with repeated values (an age, hours worked) has no such column.
PANEL_MIN_ENTITIES = 20
PANEL_MAX_ROWS = 60
PANEL_MAX_SHARE = 0.1
PANEL_CONSTANT_SHARE = 0.95
PANEL_CHANCE_SHARE = 0.5
PANEL_MAX_COMPARED = 50  # other columns compared with a candidate id


def _entity_like(values: pd.Series) -> bool:
    """Integer or text values, repeated: each value in two to :data:`PANEL_MAX_ROWS` rows on
    the median, none in more than :data:`PANEL_MAX_SHARE` of the rows."""
    present = values.dropna()
    if len(present) < 2 * PANEL_MIN_ENTITIES or pd.api.types.is_bool_dtype(values):
        return False
    if _is_number(values):
        numbers = present.to_numpy(dtype=np.float64)
        if not np.all(np.mod(numbers, 1.0) == 0.0):
            return False
    counts = present.value_counts()
    return (
        len(counts) >= PANEL_MIN_ENTITIES
        and 2 <= float(counts.median()) <= PANEL_MAX_ROWS
        and counts.iloc[0] <= PANEL_MAX_SHARE * len(present)
    )


def _constant_within(entity: np.ndarray, other: pd.Series, numeric_order: np.ndarray | None):
    """Share of the entities (codes ``entity``) with several rows in which ``other`` holds one
    value; NaN when it is no trait: chance alone would make it so for more than
    :data:`PANEL_CHANCE_SHARE` of them (a column that hardly varies), or, for a numeric
    candidate (``numeric_order``: its entities in the order of their values), it is a binning
    of the candidate itself (``age_cat`` of ``age``: few runs of one value along that order)."""
    codes = pd.factorize(other, use_na_sentinel=False)[0]
    n_values, n_entities = int(codes.max()) + 1, int(entity.max()) + 1
    sizes = np.bincount(entity, minlength=n_entities)
    several = sizes >= 2
    if not several.any():
        return np.nan
    shares = np.bincount(codes) / len(codes)
    m, count = np.unique(sizes[several], return_counts=True)
    chance = float(np.sum(count * (shares[None, :] ** m[:, None]).sum(axis=1)) / count.sum())
    if chance > PANEL_CHANCE_SHARE:
        return np.nan
    pairs = np.unique(entity.astype(np.int64) * n_values + codes)
    distinct = np.bincount(pairs // n_values, minlength=n_entities)
    constant = float(np.mean(distinct[several] == 1))
    if numeric_order is not None and constant >= PANEL_CONSTANT_SHARE:
        value_of = np.zeros(n_entities, dtype=np.int64)
        value_of[pairs // n_values] = pairs % n_values  # one value of each entity
        along = value_of[numeric_order]
        runs = 1 + int(np.count_nonzero(along[1:] != along[:-1]))
        if runs <= 2 * len(np.unique(along)):  # each value in a stretch or two: a binning
            return np.nan
    return constant


def panel_id_columns(X: pd.DataFrame) -> dict[str, tuple[float, str]]:
    """Columns of ``X`` that look like the entity id of a panel (several rows per person or
    firm: a split by rows puts one entity in training and test, and the held-out numbers
    flatter the model).

    A column is flagged when it holds integer or text values, at least
    :data:`PANEL_MIN_ENTITIES` of them, each in two to :data:`PANEL_MAX_ROWS` rows on the
    median and none in more than :data:`PANEL_MAX_SHARE` of the rows, and another column (not
    a binning of it)
    is constant within at least :data:`PANEL_CONSTANT_SHARE` of its values' rows where
    chance would not make it so (a trait of the entity). Returns ``{column: (share of
    distinct values, reason)}``.
    """
    found = {}
    distinct = None
    for column in X.columns:
        values = X[column]
        if not _entity_like(values):
            continue
        distinct = X.nunique() if distinct is None else distinct
        present = values.notna().to_numpy()
        entity, uniques = pd.factorize(values[present], sort=_is_number(values))
        n_entities = len(uniques)
        # sorted codes follow the values' order, so the entities in that order are 0, 1, ...
        order = np.arange(n_entities) if _is_number(values) else None
        others = [c for c in X.columns if c != column and distinct[c] < n_entities]
        for other in others[:PANEL_MAX_COMPARED]:
            constant = _constant_within(entity, X[other][present], order)
            if constant >= PANEL_CONSTANT_SHARE:
                share = n_entities / int(present.sum())
                rows = float(np.median(np.bincount(entity)))
                found[column] = (
                    share,
                    f"looks like the entity id of a panel: {n_entities} values ({share:.1%} "
                    f"distinct), each in {rows:g} rows on the median, and {other!r} is constant "
                    f"within {constant:.0%} of them; split by rows, one entity's rows land in "
                    f"training and test: pass --group-column {column} to keep them together",
                )
                break
    return found


def warn_screened(screening: ColumnScreening) -> None:
    """One :class:`ScreeningWarning` naming every excluded column and why (none if none), and
    one :class:`NumericTextWarning` per kept column of numbers that holds text."""
    if screening.excluded:
        warnings.warn(screening.message(), ScreeningWarning, stacklevel=3)
    for column, why in screening.numbers_with_text.items():
        warnings.warn(f"Column {column!r} holds {why}.", NumericTextWarning, stacklevel=3)
