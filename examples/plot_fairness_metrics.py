"""
Fairness metrics with intervals and suppression
===============================================

:func:`fairpca.metrics.evaluate_fairness` measures a classifier's predictions per group and
across groups, each number with a 95% interval, and publishes nothing about groups too small
to describe safely. Here a logistic regression trained on Adult without any mitigation,
evaluated for ``sex`` and ``race`` on held-out rows.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline

from fairpca.datasets import load_dataset, make_preprocessor
from fairpca.metrics import (
    demographic_parity_difference,
    equal_opportunity_difference,
    evaluate_fairness,
    selection_rates,
)

adult = load_dataset("adult", sensitive=["sex", "race"]).with_named_groups()
X_train, X_test, y_train, y_test, s_train, s_test = train_test_split(
    adult.X, adult.y, adult.sensitive, train_size=5000, test_size=6000, random_state=0
)
model = make_pipeline(make_preprocessor(adult.X), LogisticRegression(max_iter=1000))
y_pred = model.fit(X_train, y_train).predict(X_test)

# %%
# Every measure with its interval
# -------------------------------
# ``min_group_size=60``: groups with fewer test rows are suppressed, and the notes say how
# many, never which.
metrics, report = evaluate_fairness(y_test, y_pred, s_test, min_group_size=60, n_resamples=200)
for name in [
    "accuracy",
    "balanced_accuracy",
    "dp_difference",
    "dp_difference.sex",
    "dp_difference.race",
    "eo_difference",
    "selection_rate_ratio",
]:
    print(
        f"{name:22s} {metrics[name]:.3f}  [{metrics[name + '.ci95_low']:.3f}, "
        f"{metrics[name + '.ci95_high']:.3f}]"
    )
for note in report.notes:
    print("note:", note)

# %%
# Per-group rates
# ---------------
# With sex and race together, a suppressed race group could be recovered from the published
# per-group counts of both attributes by differencing, so race's per-group values are
# withheld and only its differences published (the notes above). Evaluated for race alone,
# its large groups are published; the two small ones stay suppressed.
published = []
for attribute in ["sex", "race"]:
    alone, alone_report = evaluate_fairness(
        y_test, y_pred, s_test[[attribute]], min_group_size=60, n_resamples=200
    )
    for row in alone_report.group_table().itertuples():
        rate = row.selection_rate
        interval = (
            alone[f"selection_rate.{row.key}.ci95_low"],
            alone[f"selection_rate.{row.key}.ci95_high"],
        )
        published.append((row.key, row.size, rate, interval))
        print(
            f"{row.key:28s} {row.size:5d} rows  selection rate {rate:.3f}  "
            f"[{interval[0]:.3f}, {interval[1]:.3f}]"
        )

fig, ax = plt.subplots(figsize=(7, 3.5))
rates = np.array([rate for _, _, rate, _ in published])
errors = np.array([[rate - low, high - rate] for _, _, rate, (low, high) in published]).T
ax.errorbar(rates, np.arange(len(published)), xerr=errors, fmt="o", capsize=3)
ax.set_yticks(np.arange(len(published)), [key for key, *_ in published])
ax.axvline(metrics["positive_rate"], color="gray", linestyle=":", label="overall")
ax.set_xlabel("selection rate (test rows, 95% intervals)")
ax.legend()
fig.tight_layout()

# %%
# Plain numbers
# -------------
# Without suppression or intervals, every group kept (for your own analysis, not for
# publishing). Note how a spread over all groups can be driven by a group of a few dozen
# rows, whose rates are mostly noise: the reason for the suppression and the intervals above.
print(selection_rates(y_pred, s_test["race"]))
print(
    demographic_parity_difference(y_pred, s_test),
    equal_opportunity_difference(y_test, y_pred, s_test),
)
plt.show()
