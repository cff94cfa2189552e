"""Representation tasks: the preprocessor and the (fair) PCA variants, each fitted once."""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE
from sklearn.decomposition import PCA

from fairpca._groups import MIN_ROWS_PER_GROUP, numbered_groups
from fairpca.datasets import MIN_CATEGORY_COUNT

# The messages of the refusals below (str.format templates; tests name them, not their words)
NO_DIMENSION_LEFT = (
    "the training rows encode to {n_features} feature column(s) and the sensitive attribute(s) "
    "impose {constraints} group-mean constraint(s), so fair PCA has no dimension left; pass "
    "sensitive attributes with fewer groups (merge the small ones) or add feature columns."
)
K_TOO_LARGE = (
    "k={requested} is larger than possible: the training rows encode to {n_features} feature "
    "column(s) and the sensitive attribute(s) impose {constraints} group-mean constraint(s), so "
    "at most k={k_max}; pass -k {k_max} or less."
)


def make_preprocessor(X, min_category_count: int = MIN_CATEGORY_COUNT) -> Any:
    """Unfitted ColumnTransformer (rare categories pooled, one-hot categoricals,
    standardized numerics)."""
    from fairpca.datasets import make_preprocessor as make

    return make(X, min_category_count=min_category_count)


@task(name="fit-preprocessor", cache_policy=NO_CACHE)
def fit_preprocessor(
    split, min_category_count: int = MIN_CATEGORY_COUNT
) -> tuple[Any, np.ndarray, np.ndarray]:
    """Fit the preprocessor on the training rows only; return it and the encoded training
    and validation features (the test rows are encoded by the final pipeline only).

    Categories with fewer than ``min_category_count`` training rows are pooled before
    encoding, so the fitted (and logged) preprocessor stores none of them.
    """
    preprocessor = make_preprocessor(split.X_train, min_category_count)
    encoded_train = np.asarray(preprocessor.fit_transform(split.X_train), dtype=np.float64)
    encoded_validation = np.asarray(preprocessor.transform(split.X_validation), dtype=np.float64)
    return preprocessor, encoded_train, encoded_validation


def make_representation(variant: str, k: int, *, equalize_covariance: float, seed: int) -> Any:
    """Unfitted estimator for one representation variant (the one place that picks classes).

    ``pca`` is standard PCA; ``fair_pca`` fair PCA for demographic parity (Algorithm 1),
    ``fair_pca_eo`` the equal opportunity version fitted on the positive rows (Sec. 3.2),
    ``fair_pca_s`` the variant that also equalizes group covariances with
    ``l = max(k, floor(f * d))`` (Sec. 3.6), ``fair_kernel_pca`` the kernel version (Sec. 3.3).
    """
    if variant == "pca":
        return PCA(n_components=k, random_state=seed)
    from fairpca import FairKernelPCA, FairPCA

    fair = {
        "fair_pca": {},
        "fair_pca_eo": {"constraint": "equal_opportunity"},
        "fair_pca_s": {"equalize_covariance": equalize_covariance},
    }
    if variant in fair:
        return FairPCA(n_components=k, random_state=seed, **fair[variant])
    if variant == "fair_kernel_pca":
        # Nystroem with 500 landmarks bounds the cost (exact is O(n^3) in the training rows).
        return FairKernelPCA(
            n_components=k, approximation="nystroem", n_landmarks=500, random_state=seed
        )
    raise ValueError(f"unknown representation variant {variant!r}.")


def supports_tradeoff(estimator: Any) -> bool:
    """Whether the estimator appends ``tradeoff * PCA`` features (Sec. 3.1)."""
    return "tradeoff" in estimator.get_params()


def uses_sensitive_features(estimator: Any) -> bool:
    """Whether ``fit`` takes ``sensitive_features`` (the fair variants)."""
    return not isinstance(estimator, PCA)


@dataclass
class FittedRepresentation:
    """One fitted variant with its training-time facts (no raw data)."""

    variant: str
    estimator: Any
    fit_seconds: float
    facts: dict[str, float] = field(default_factory=dict)

    @property
    def supports_tradeoff(self) -> bool:
        """Whether the estimator appends ``tradeoff * PCA`` features (a lambda sweep)."""
        return supports_tradeoff(self.estimator)

    def matrices(self) -> dict[str, np.ndarray]:
        """Projection matrices to keep as artifacts (components_, mean_, PCA components).

        Not the constraint basis: it spans the group-mean differences, so for a small group
        it points at those few people's average row.
        """
        names = ("components_", "mean_", "pca_components_")
        values = {name: getattr(self.estimator, name, None) for name in names}
        return {name: value for name, value in values.items() if isinstance(value, np.ndarray)}


def merge_single_row_groups(sensitive: pd.DataFrame) -> pd.DataFrame:
    """The training attributes with every group of fewer than two rows merged into the
    attribute's largest group.

    A group mean over one row is that person's row, and the estimators need two rows per
    group; such a group keeps no constraint of its own (its row still counts in the largest
    group's mean), so a one-person group never stops the audit. Its metrics are suppressed
    anyway (the evaluation's ``min_group_size``).
    """
    frame = pd.DataFrame(sensitive).copy()
    for column in frame.columns:
        counts = frame[column].value_counts()
        tiny = counts.index[counts < MIN_ROWS_PER_GROUP]
        if len(tiny) and len(counts) > len(tiny):
            frame.loc[frame[column].isin(tiny), column] = counts.index[0]
    return frame


DEFAULT_MAX_K = 10  # the smallest k of the default grid (the former default k)


def largest_k(n_features: int, sensitive: pd.DataFrame, variants: list[str]) -> tuple[int, int]:
    """``(k_max, r)``: fair PCA keeps ``U`` in the null space of the ``r = sum_a (g_a - 1)``
    group-mean constraints (Algorithm 1, stacked attributes as in Sec. 3.5), so
    ``k <= d - r``; with standard PCA alone ``k <= d``. Groups of one row are merged first,
    as for fitting (:func:`merge_single_row_groups`)."""
    merged = merge_single_row_groups(sensitive)
    constraints = int(sum(merged[column].nunique() - 1 for column in merged.columns))
    fair = any(variant != "pca" for variant in variants)
    return (n_features - constraints if fair else n_features), constraints


def k_grid(k_max: int, given: list[int] | None = None) -> list[int]:
    """The k values searched when k is not fixed: ``given`` (those that fit), else
    ``DEFAULT_MAX_K`` doubling while below ``k_max``, and ``k_max`` itself (Adult, 63 fair
    directions: 10, 20, 40, 63). A larger k keeps more of the signal that fair PCA leaves
    (the projection is fair at every k, Algorithm 1), at the cost of a wider classifier."""
    if given:
        return sorted({k for k in given if k <= k_max}) or [k_max]
    doubling = (DEFAULT_MAX_K * 2**i for i in itertools.count())
    return [*itertools.takewhile(lambda k: k < k_max, doubling), k_max]


def resolve_k(
    requested: int | None, n_features: int, sensitive: pd.DataFrame, variants: list[str],
    grid: list[int] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The k the audit fits, as it records it (``k``): ``requested`` when it fits (the only k
    tried), else a :class:`ValueError` naming the largest; when None, the search grid
    :func:`k_grid` up to the largest k the encoded training data allow (``grid``: the k values
    asked for). ``largest`` is that one largest k; ``fitted`` the largest k fitted."""
    k_max, constraints = largest_k(n_features, sensitive, variants)
    facts = dict(requested=requested, n_features=n_features, constraints=constraints, k_max=k_max)
    if k_max < 1:
        raise ValueError(NO_DIMENSION_LEFT.format(**facts))
    if requested is not None and requested > k_max:
        raise ValueError(K_TOO_LARGE.format(**facts))
    largest = f"{k_max} = {n_features} columns - {constraints} constraints"
    searched = [requested] if requested is not None else k_grid(k_max, grid)
    note = (
        f"k={requested} as given (the largest k the data allow is {largest})"
        if requested is not None
        else f"k not given: k={k_max}, the largest k the encoded training data allow ({largest})"
        if searched == [k_max]
        else f"k not given: searching k in {searched} on the validation rows (the largest k "
        f"the encoded training data allow is {largest})"
    )
    return dict(requested=requested, fitted=searched[-1], grid=searched, largest=k_max, note=note)


# Fair PCA-S: the fractions f (l = floor(f d)) tried when none is given, most equalizing
# first; the first whose k directions keep at least KEPT_VARIANCE_SHARE of the variance that
# plain fair PCA keeps is used. l = floor(0.5 d) keeps 7% of Adult's variance (fair PCA: 67%).
EQUALIZE_COVARIANCE_GRID = (0.5, 0.75, 0.9, 0.95, 0.98)
KEPT_VARIANCE_SHARE = 0.5


def _fit_fair_pca_s(encoded_train, s_train, k: int, seed: int) -> tuple[Any, dict[str, float]]:
    """Fair PCA-S at the smallest grid fraction that keeps the signal (see the grid)."""
    from fairpca import FairPCA

    unequalized = FairPCA(n_components=k).fit(encoded_train, sensitive_features=s_train)
    plain = float(np.sum(unequalized.explained_variance_ratio_))
    for fraction in EQUALIZE_COVARIANCE_GRID:
        estimator = FairPCA(n_components=k, equalize_covariance=fraction, random_state=seed)
        estimator.fit(encoded_train, sensitive_features=s_train)
        kept = float(np.sum(estimator.explained_variance_ratio_))
        if kept >= KEPT_VARIANCE_SHARE * plain:
            break
    facts = {"equalize_covariance": fraction, "kept_variance": kept, "kept_variance_fair": plain}
    return estimator, facts


# Fair PCA-S on the intersection: the stacked attributes' cells as one attribute, so the
# covariances of the cells (not only of each attribute's groups) are matched (Sec. 3.6).
INTERSECTION_VARIANT = "fair_pca_s_intersection"


def intersection_cells(sensitive) -> pd.DataFrame:
    """One column whose groups are the cells of the stacked attributes (``sex:F/race:B``)."""
    frame = pd.DataFrame(sensitive).astype(str).reset_index(drop=True)
    cells = frame.apply(lambda row: "/".join(f"{c}:{row[c]}" for c in frame.columns), axis=1)
    return merge_single_row_groups(pd.DataFrame({"intersection": cells}))


@task(name="fit-representation", cache_policy=NO_CACHE, task_run_name="fit-{variant}")
def fit_representation(
    variant: str, encoded_train: np.ndarray, y_train: np.ndarray, s_train, *, k: int,
    equalize_covariance: float | None, seed: int,
) -> FittedRepresentation:  # fmt: skip
    """Fit one variant with ``k`` components on the encoded training rows (sensitive
    features passed at fit only). Fair PCA-S without ``equalize_covariance`` picks its ``l``
    from :data:`EQUALIZE_COVARIANCE_GRID`."""
    if variant == INTERSECTION_VARIANT:  # k within the cells' constraints (cells - 1)
        cells = intersection_cells(s_train)
        k = min(k, encoded_train.shape[1] - (cells["intersection"].nunique() - 1))
        fitted = fit_representation.fn(
            "fair_pca_s", encoded_train, y_train, cells, k=k,
            equalize_covariance=equalize_covariance, seed=seed,
        )  # fmt: skip
        return dataclasses.replace(fitted, variant=variant)
    start = time.perf_counter()
    facts: dict[str, float] = {"k": float(k)}
    if variant == "fair_pca_s" and equalize_covariance is None:
        estimator, chosen = _fit_fair_pca_s(
            encoded_train, numbered_groups(merge_single_row_groups(s_train)), k, seed
        )
        facts |= chosen
    else:
        estimator = make_representation(
            variant, k, equalize_covariance=equalize_covariance or 0.5, seed=seed
        )
        if variant == "fair_kernel_pca":  # no more landmarks than training rows
            estimator.set_params(n_landmarks=min(estimator.n_landmarks, len(encoded_train)))
        if uses_sensitive_features(estimator):
            s_train = numbered_groups(merge_single_row_groups(s_train))  # no label stored
            estimator.fit(encoded_train, y_train, sensitive_features=s_train)
        else:
            estimator.fit(encoded_train)
    seconds = time.perf_counter() - start
    gap = getattr(estimator, "mean_gap_", None)
    if gap is not None:
        facts["mean_gap_fit"] = float(gap)
    return FittedRepresentation(variant, estimator, seconds, facts)
