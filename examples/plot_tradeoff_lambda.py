"""
The accuracy / fairness trade-off (lambda)
==========================================

Section 3.1 of the paper appends ``lambda`` times the standard PCA features to the fair
ones: ``lambda = 0`` is fair PCA, ``lambda = 1`` carries everything PCA knows. ``FairPCA``
computes both projections at fit time, so a whole sweep costs one fit: change ``tradeoff``
with ``set_params`` and transform again. Here a logistic regression on Adult, at each lambda,
with the 95% intervals of its accuracy and demographic-parity difference.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from fairpca import FairPCA
from fairpca.datasets import load_dataset, make_preprocessor
from fairpca.metrics import evaluate_fairness

adult = load_dataset("adult").with_named_groups()
X_train, X_test, y_train, y_test, s_train, s_test = train_test_split(
    adult.X,
    adult.y,
    adult.sensitive,
    train_size=8000,
    test_size=8000,
    stratify=adult.y,
    random_state=0,
)
encoder = make_preprocessor(adult.X).fit(X_train)
X_train, X_test = encoder.transform(X_train), encoder.transform(X_test)

fpca = FairPCA(n_components=10).fit(X_train, sensitive_features=s_train)  # one fit

# %%
# The sweep: lambda = (i/10)^3, as the audit does
lambdas = [(i / 10) ** 3 for i in range(11)]
curve = []
for lam in lambdas:
    fpca.set_params(tradeoff=lam)  # no refit
    Z_train, Z_test = fpca.transform(X_train), fpca.transform(X_test)
    y_pred = LogisticRegression(C=0.1, max_iter=1000).fit(Z_train, y_train).predict(Z_test)
    metrics, _ = evaluate_fairness(y_test, y_pred, s_test, n_resamples=200, seed=0)
    curve.append(metrics)
    print(
        f"lambda={lam:.3f}  accuracy {metrics['accuracy']:.3f}  "
        f"DP difference {metrics['dp_difference']:.3f}"
    )


# %%
# Accuracy rises and fairness falls as lambda grows; the intervals show what the test rows
# can tell apart.
def band(name):
    value = np.array([m[name] for m in curve])
    low = value - np.array([m[f"{name}.ci95_low"] for m in curve])
    high = np.array([m[f"{name}.ci95_high"] for m in curve]) - value
    return value, np.vstack([low, high])


fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for ax, name, label in [
    (axes[0], "accuracy", "accuracy"),
    (axes[1], "dp_difference", "DP difference"),
]:
    value, err = band(name)
    ax.errorbar(lambdas, value, yerr=err, marker="o", capsize=3)
    ax.set_xlabel("lambda")
    ax.set_title(f"{label} (test rows, 95% intervals)")
fig.tight_layout()

fig, ax = plt.subplots(figsize=(5, 4))
dp, dp_err = band("dp_difference")
acc, acc_err = band("accuracy")
ax.errorbar(dp, acc, xerr=dp_err, yerr=acc_err, fmt="o-", capsize=2)
for i in (0, 3, 4, 5, 6, 10):  # the small lambdas all sit at the fair end
    ax.annotate(
        f"{lambdas[i]:.3f}",
        (dp[i], acc[i]),
        textcoords="offset points",
        xytext=(6, -12),
        fontsize=8,
    )
ax.set_xlabel("DP difference")
ax.set_ylabel("accuracy")
ax.set_title("the trade-off curve (labels: lambda)")
fig.tight_layout()
plt.show()
