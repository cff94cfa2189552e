"""Prefect tasks of the fairness audit: data, representations, sweep, evaluation, report and
MLflow logging. The repository folder ``tasks/`` installs as ``fairpca.tasks``; import the
submodules (``fairpca.tasks.data``, ``fairpca.tasks.sweep``, ...) directly.

The defaults below are shared by the tasks and the audit's settings (:mod:`fairpca.flows.config`);
this module imports nothing, so the command line reads its flags without Prefect or
scikit-learn.

For your own flows use :mod:`fairpca.tasks.public` (stable names and signatures); the MLflow
evaluator ``fairness`` is :mod:`fairpca.tasks.mlflow_evaluator`."""

# The audit's smallest reported group: fewer rows get no per-group number. Above the library's
# floor (fairpca.metrics.MIN_GROUP_SIZE_FLOOR, 10), so that no published rate comes close to
# describing a single person.
DEFAULT_MIN_GROUP_SIZE = 30

CLASSIFIER_NAMES = ("logreg", "logreg_tuned", "rbf_svc", "linear_svm", "mlp")
# What the audit fits unless told otherwise: only classifiers whose fitted state holds no
# training rows, since only those can be registered (an RBF SVC keeps support vectors).
DEFAULT_CLASSIFIERS = ("logreg", "logreg_tuned", "linear_svm")

# Demographic parity with the four-fifths rule: on Adult, equal opportunity on top of it is
# met only by classifiers that hardly ever predict the positive class.
DEFAULT_POLICY = "demographic_parity+four_fifths"

# Estimates by default: on 2,500 validation rows the upper 95% bound of a fair classifier's DP
# difference at a 25% selection rate is ~0.07, so judged on it at 0.05 only classifiers that
# rarely say yes pass. ``upper_bound`` is the strict option for large validation parts.
DEFAULT_BOUND = "point"

# What a candidate must gain over the majority class (saying its label to every row) on the
# selection measure: accuracy over the majority's accuracy, or balanced accuracy over the
# majority's 0.5. A classifier tuned for balanced accuracy trades accuracy for the rarer
# class: on HealthInsurance (80% positives) useful ones sit near 0.70 accuracy, below the
# majority's 0.80, so measuring them by accuracy would leave only those that say yes to all.
MIN_ACCURACY_GAIN = 0.01
# Lower 95% bound of balanced accuracy (mean of TPR and TNR) over chance (0.5) by this much.
# A classifier saying "yes" for 2% of Adult rows (TPR ~0.05, TNR ~0.995) reaches ~0.52.
MIN_BALANCED_ACCURACY_MARGIN = 0.05
# The predicted-positive rate must be at least this share of the base rate, and the
# predicted-negative rate this share of the negative base rate (no collapse onto one class).
MIN_POSITIVE_RATE_RATIO = 0.25
MAX_ONE_CLASS_SHARE = 0.98  # more of one predicted class than this is degenerate

# Certification: 1.96 standard errors of each gated measure (a 95% resolution) may be at most
# ``certify_factor`` times the policy's band (the limit of a difference; 1 - the minimum of a
# ratio). At factor 1, a classifier without any disparity passes the point gate in at least
# 95% of samples of this size, and one at twice the limit in at most 2.5%.
CERTIFY_Z = 1.959964
DEFAULT_CERTIFY_FACTOR = 1.0
