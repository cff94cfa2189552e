"""Evaluation metrics for fair representations and the classifiers trained on them.

These are the metrics of Section 5 of Kleindessner et al. (2023), "Efficient fair PCA for fair
representation learning", usable on any representation (fair PCA, PCA, INLP, LEACE, ...), one
job per module:

- representation quality (``_representation``): :func:`explained_variance_fraction` (%Var / 100
  in Tables 1-3), :func:`mmd_squared` (MMD^2 between the groups with a Gaussian kernel, Lee et
  al., 2022), :func:`linear_inseparability` (test error of a linear classifier predicting the
  group), :func:`group_reconstruction_error` and :func:`group_mean_gap` (what the fair PCA
  constraint zeroes);
- classifier fairness (``_counts``, ``_fairness``): :func:`group_fairness` and
  :func:`bootstrap_intervals` -- the one definition of accuracy, balanced accuracy, ROC AUC,
  positive rate, base rate, one-class share, per-group selection rate / TPR / FPR / base rate,
  and the DP, EO and FPR differences, the equalized-odds difference and the selection-rate
  ratio, per attribute, over intersections and worst over attributes, with intervals that
  contain their estimate (``_intervals``; :func:`ci_metrics` names them;
  :func:`evaluate_fairness` gives both as one dictionary); the audit flow, the
  MLflow ``fairness`` evaluator and the benchmarks all use it;
- disclosure control (``_disclosure``): every published number is computed from the rows
  outside groups and intersection cells smaller than ``min_group_size`` of every sensitive
  column known (the reported ones and ``protected_features``; and, when those rows are fewer
  than ``min_group_size``, outside one more cell), so no evaluation nor the difference of two
  that know the same columns depends on a small group (:func:`published_group_sizes` for
  group sizes published on their own);
- metric names (``_names``): the one builder of MLflow-valid names;
- :func:`demographic_parity_difference`, :func:`equal_opportunity_difference`,
  :func:`selection_rates`, :func:`true_positive_rates` and :func:`accuracy` (``_plain``) -- the
  same quantities as plain numbers and dictionaries (every group kept).

Sensitive features
------------------
Every metric that takes group labels accepts them as ``sensitive_features``: a 1-D array-like of
hashable labels (ints, strings, bools, pandas categoricals, ...), one per row. A 2-D array or a
DataFrame means several sensitive attributes, one per column. As in fair PCA with several
attributes (Section 3.5), each attribute is treated on its own (its marginal groups):
scalar metrics report the worst attribute (the largest disparity; for
:func:`linear_inseparability` the smallest error), and per-group dictionaries are keyed by
``(attribute, label)`` where ``attribute`` is the DataFrame column name or the column index.
:func:`group_fairness` also reports the intersections of the attributes (fairlearn's groups).
Missing labels (NaN/None) are rejected.
"""

from .._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._counts": ["MIN_GROUP_SIZE_FLOOR"],
        "._disclosure": ["published_group_sizes"],
        "._fairness": [
            "FairnessReport",
            "GroupFairness",
            "bootstrap_intervals",
            "check_fairness_options",
            "ci_metrics",
            "evaluate_fairness",
            "group_fairness",
        ],
        "._plain": [
            "accuracy",
            "demographic_parity_difference",
            "equal_opportunity_difference",
            "selection_rates",
            "true_positive_rates",
        ],
        "._representation": [
            "as_components",
            "explained_variance_fraction",
            "group_mean_gap",
            "group_reconstruction_error",
            "linear_inseparability",
            "median_heuristic_sigma",
            "mmd_squared",
        ],
    },
)
