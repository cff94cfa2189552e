"""Confidence intervals that contain their estimate and keep their coverage.

- A proportion (accuracy, positive rate, base rate, a group's rate): the Clopper-Pearson
  interval, exact: its coverage is at least the nominal level for every true proportion and
  sample size, and it always contains the observed proportion.
- A spread ``max_g p_g - min_g p_g`` or a ratio ``min_g p_g / max_g p_g`` over the ``m``
  groups of a grouping: simultaneous per-group Clopper-Pearson intervals ``[L_g, U_g]`` at level
  ``1 - alpha / m`` (Bonferroni), so that with probability at least ``1 - alpha`` every ``p_g``
  lies in its interval, and then ``max_g p_g - min_g p_g`` lies in
  ``[max(0, max_g L_g - min_g U_g), max_g U_g - min_g L_g]`` and ``min_g p_g / max_g p_g`` in
  ``[min_g L_g / max_g U_g, min(1, min_g U_g / max_g L_g)]``. Coverage is at least nominal
  (conservative), and the interval contains the estimate because each ``[L_g, U_g]`` contains
  the observed rate. Unlike a percentile bootstrap of the spread it is not biased upward near
  zero. The worst value over ``A`` attributes uses level ``1 - alpha / A`` per attribute.
- Balanced accuracy: the percentile bootstrap (rows resampled within each intersection group),
  widened where needed to contain the estimate (which can only raise its coverage).
- ROC AUC: DeLong's variance on the logit scale (inside (0, 1), contains the estimate).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from scipy import special, stats

from ._counts import FN, FP, TN, TP, FairnessProblem, fraction, overall, rates, ratio

# A bootstrap block holds at most this many cell counts (64 MiB of float64).
BOOTSTRAP_BLOCK_ENTRIES = 1 << 23


def check_bootstrap(n_resamples: Any, confidence: Any) -> None:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, numbers.Integral):
        raise TypeError(f"n_resamples must be an int, got {n_resamples!r}.")
    if n_resamples < 2:
        raise ValueError(f"n_resamples must be at least 2, got {n_resamples}; 1000 is typical.")
    if isinstance(confidence, bool) or not isinstance(confidence, numbers.Real):
        raise TypeError(f"confidence must be a float in (0, 1), got {confidence!r}.")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}.")


def clopper_pearson(hits, trials, alpha) -> tuple[np.ndarray, np.ndarray]:
    """Exact two-sided ``1 - alpha`` interval of ``hits / trials``; NaN where ``trials == 0``."""
    hits, trials = np.asarray(hits, dtype=np.float64), np.asarray(trials, dtype=np.float64)
    alpha = np.broadcast_to(np.asarray(alpha, dtype=np.float64), hits.shape)
    valid = trials > 0
    safe_trials = np.where(valid, trials, 1.0)
    # Beta quantiles: special.betaincinv(a, b, q) is stats.beta.ppf(q, a, b) (the same
    # values) without its per-call argument handling, 12x faster on a few groups' counts.
    with np.errstate(invalid="ignore"):
        low = special.betaincinv(hits, safe_trials - hits + 1, alpha / 2)
        high = special.betaincinv(hits + 1, safe_trials - hits, 1 - alpha / 2)
    low = np.where(hits > 0, low, 0.0)
    high = np.where(hits < safe_trials, high, 1.0)
    # Rounding of the beta quantiles must never exclude the estimate.
    point = hits / safe_trials
    low, high = np.minimum(low, point), np.maximum(high, point)
    return np.where(valid, low, np.nan), np.where(valid, high, np.nan)


def group_rate_intervals(counts: np.ndarray, keep: np.ndarray, rate: str, alpha: float):
    """Simultaneous intervals of one rate over the kept groups of counts (n_groups, 4).

    Bonferroni over the ``m`` kept groups whose rate is defined: each at level ``1 - alpha/m``.
    Groups not kept or undefined get NaN.
    """
    hits, trials = fraction(counts, rate)
    used = keep & (trials > 0)
    m = max(int(used.sum()), 1)
    low, high = clopper_pearson(hits, np.where(used, trials, 0.0), alpha / m)
    return low, high


def spread_interval(low: np.ndarray, high: np.ndarray) -> tuple[float, float]:
    """Interval of ``max_g p_g - min_g p_g`` from simultaneous per-group intervals."""
    defined = np.isfinite(low)
    if defined.sum() < 2:
        return np.nan, np.nan
    low, high = low[defined], high[defined]
    return float(max(0.0, low.max() - high.min())), float(high.max() - low.min())


def ratio_interval(low: np.ndarray, high: np.ndarray, point: float) -> tuple[float, float]:
    """Interval of ``min_g p_g / max_g p_g`` from simultaneous per-group intervals."""
    defined = np.isfinite(low)
    if defined.sum() < 2 or not np.isfinite(point):
        return np.nan, np.nan
    low, high = low[defined], high[defined]
    upper = 1.0 if low.max() <= 0 else min(1.0, high.min() / low.max())
    return float(low.min() / high.max()), float(max(upper, point))


def grouping_intervals(counts: np.ndarray, keep: np.ndarray, alpha: float) -> dict:
    """Intervals of every difference, the selection-rate ratio and each group's rates.

    Returns ``{measure: (low, high)}`` for the differences and ratio, and
    ``{rate: (low array, high array)}`` under the key ``"groups"`` (level ``1 - alpha`` jointly
    over the groups, per rate).
    """
    per_rate = {rate: group_rate_intervals(counts, keep, rate, alpha) for rate in
                ("selection_rate", "tpr", "fpr", "base_rate")}  # fmt: skip
    point_ratio = _point_ratio(counts, keep)
    result = {
        "dp_difference": spread_interval(*per_rate["selection_rate"]),
        "eo_difference": spread_interval(*per_rate["tpr"]),
        "fpr_difference": spread_interval(*per_rate["fpr"]),
        "selection_rate_ratio": ratio_interval(*per_rate["selection_rate"], point_ratio),
        "groups": per_rate,
    }
    # Equalized odds: TPR and FPR intervals jointly (Bonferroni over both rates' groups).
    tpr = spread_interval(*group_rate_intervals(counts, keep, "tpr", alpha / 2))
    fpr = spread_interval(*group_rate_intervals(counts, keep, "fpr", alpha / 2))
    if np.isfinite(tpr[0]) and np.isfinite(fpr[0]):
        result["equalized_odds_difference"] = (max(tpr[0], fpr[0]), max(tpr[1], fpr[1]))
    else:
        result["equalized_odds_difference"] = (np.nan, np.nan)
    return result


def _point_ratio(counts: np.ndarray, keep: np.ndarray) -> float:
    return float(ratio(rates(counts)["selection_rate"], keep))


def worst_interval(intervals: list, *, lowest: bool = False) -> tuple[float, float]:
    """Interval of the worst value over attributes (max; ``lowest``: min), ignoring NaN."""
    defined = [iv for iv in intervals if np.isfinite(iv[0])]
    if not defined:
        return np.nan, np.nan
    pick = min if lowest else max
    return float(pick(iv[0] for iv in defined)), float(pick(iv[1] for iv in defined))


def overall_intervals(problem: FairnessProblem, alpha: float) -> dict:
    """Clopper-Pearson intervals of accuracy, positive rate and base rate, and the one-class
    share's interval as the image of the positive rate's under ``p -> max(p, 1 - p)``."""
    total = problem.counts.sum(axis=0)
    n = total.sum()
    result = {
        "accuracy": clopper_pearson(total[TN] + total[TP], n, alpha),
        "positive_rate": clopper_pearson(total[FP] + total[TP], n, alpha),
        "base_rate": clopper_pearson(total[FN] + total[TP], n, alpha),
    }
    low, high = (float(v) for v in result["positive_rate"])
    ends = (max(low, 1 - low), max(high, 1 - high))
    result["one_class_share"] = (0.5 if low <= 0.5 <= high else min(ends), max(ends))
    return {k: (float(lo), float(hi)) for k, (lo, hi) in result.items()}


def balanced_accuracy_interval(
    problem: FairnessProblem, n_resamples: int, confidence: float, seed: Any
) -> tuple[float, float]:
    """Percentile bootstrap of balanced accuracy, widened to contain the estimate.

    Rows are resampled within each intersection group: the counts of group ``g`` are drawn from
    ``Multinomial(n_g, observed cell fractions)``, all resamples at once. A resample without
    positives or without negatives (balanced accuracy undefined) is left out.
    """
    point = float(overall(problem.counts.sum(axis=0))["balanced_accuracy"])
    if not np.isfinite(point):
        return np.nan, np.nan
    rng = np.random.default_rng(seed)
    sizes = problem.counts.sum(axis=1).astype(np.int64)
    fractions = problem.counts / sizes[:, None]
    block = max(1, BOOTSTRAP_BLOCK_ENTRIES // fractions.size)
    values = []
    for start in range(0, n_resamples, block):
        n_block = min(block, n_resamples - start)
        draws = rng.multinomial(sizes, fractions, size=(n_block, sizes.size))
        values.append(overall(draws.sum(axis=1).astype(np.float64))["balanced_accuracy"])
    samples = np.concatenate(values)
    samples = samples[np.isfinite(samples)]
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(samples, [tail, 1.0 - tail])
    return float(min(low, point)), float(max(high, point))


def roc_auc(actual: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties count one half); NaN with one class."""
    n_pos, n_neg = int(actual.sum()), int((~actual).sum())
    if n_pos == 0 or n_neg == 0:
        return np.nan
    ranks = stats.rankdata(score)
    return float((ranks[actual].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def roc_auc_interval(actual: np.ndarray, score: np.ndarray, alpha: float) -> tuple[float, float]:
    """DeLong's interval of the ROC AUC, computed on the logit scale and mapped back.

    DeLong, DeLong and Clarke-Pearson (1988): the AUC is a two-sample U-statistic; its variance
    is ``var(V10) / n_pos + var(V01) / n_neg`` with ``V10_i`` (``V01_j``) the share of negatives
    (positives) that positive ``i`` outranks (negative ``j`` is outranked by). The Wald interval
    of ``logit(AUC)`` (variance ``var / (AUC (1 - AUC))^2``) stays inside (0, 1); an AUC of 0 or
    1 gets the degenerate interval at the estimate.
    """
    auc = roc_auc(actual, score)
    if not np.isfinite(auc):
        return np.nan, np.nan
    if auc <= 0.0 or auc >= 1.0:
        return auc, auc
    positives, negatives = score[actual], score[~actual]
    all_ranks = stats.rankdata(score)
    v10 = (all_ranks[actual] - stats.rankdata(positives)) / negatives.size
    v01 = 1.0 - (all_ranks[~actual] - stats.rankdata(negatives)) / positives.size
    variance = np.var(v10, ddof=1) / positives.size if positives.size > 1 else 0.0
    variance += np.var(v01, ddof=1) / negatives.size if negatives.size > 1 else 0.0
    z = stats.norm.ppf(1 - alpha / 2)
    half = z * np.sqrt(variance) / (auc * (1 - auc))
    logit = np.log(auc / (1 - auc))
    low, high = (1 / (1 + np.exp(-(logit + s * half))) for s in (-1.0, 1.0))
    return float(min(low, auc)), float(max(high, auc))
