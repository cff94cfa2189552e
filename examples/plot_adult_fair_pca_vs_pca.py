"""
Fair PCA versus PCA on Adult
============================

Fair PCA (Algorithm 1 of Kleindessner et al., 2023) is PCA with one constraint: the
projected means of the groups coincide. This example compares it with PCA on the bundled
Adult census data, with ``sex`` as the sensitive attribute: how far apart the group means
are, how much variance each keeps, and how fair a logistic regression trained on each
representation is on held-out rows.
"""

# %%
# The data: a training and a test part of Adult
# ---------------------------------------------
import matplotlib.pyplot as plt
import numpy as np
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from fairpca import FairPCA
from fairpca.datasets import load_dataset, make_preprocessor
from fairpca.metrics import explained_variance_fraction, group_fairness, group_mean_gap

adult = load_dataset("adult").with_named_groups()  # groups by name: Female / Male
X_train, X_test, y_train, y_test, s_train, s_test = train_test_split(
    adult.X,
    adult.y,
    adult.sensitive["sex"],
    train_size=10_000,
    test_size=10_000,
    stratify=adult.y,
    random_state=0,
)
encoder = make_preprocessor(adult.X).fit(X_train)  # fitted on training rows only
X_train, X_test = encoder.transform(X_train), encoder.transform(X_test)
print(f"{X_train.shape[1]} encoded features")

# %%
# Fit both projections
# --------------------
# Fair PCA needs the sensitive attribute to fit, never to transform.
k = 10
pca = PCA(n_components=k).fit(X_train)
fpca = FairPCA(n_components=k).fit(X_train, sensitive_features=s_train)
print(
    f"mean gap on training rows: PCA {group_mean_gap(pca.transform(X_train), s_train):.3f}, "
    f"fair PCA {fpca.mean_gap_:.1e}"
)

# %%
# What each keeps and what it leaks
# ---------------------------------
# On the test rows: the share of variance kept, the distance between the group means in the
# projection, and the demographic-parity difference of a logistic regression trained on it
# (with its 95% interval).
rows = {}
for name, model in [("PCA", pca), ("fair PCA", fpca)]:
    Z_train, Z_test = model.transform(X_train), model.transform(X_test)
    classifier = LogisticRegression(max_iter=1000).fit(Z_train, y_train)
    y_pred = classifier.predict(Z_test)
    report = group_fairness(y_test, y_pred, s_test)
    rows[name] = {
        "variance kept": explained_variance_fraction(X_test, model.components_),
        "mean gap": group_mean_gap(Z_test, s_test),
        "accuracy": report.accuracy,
        "DP difference": report.dp_difference,
    }
    rates = report.attributes["sex"].selection_rate
    print(
        f"{name:9s}",
        {key: round(value, 3) for key, value in rows[name].items()},
        "selection rates",
        {group: round(rate, 3) for group, rate in rates.items()},
    )

# %%
# The constraint removes the difference of the group means in every direction it keeps;
# the logistic regression trained on the fair representation selects women and men at
# nearly the same rate, at a small cost in accuracy.
fig, axes = plt.subplots(1, 4, figsize=(11, 3))
for ax, measure in zip(
    axes, ["variance kept", "mean gap", "accuracy", "DP difference"], strict=True
):
    ax.bar(list(rows), [rows[name][measure] for name in rows], color=["tab:gray", "tab:blue"])
    ax.set_title(measure)
fig.tight_layout()

# %%
# The first direction of each projection, by group
# ------------------------------------------------
fig, axes = plt.subplots(1, 2, figsize=(9, 3), sharey=True)
for ax, (name, model) in zip(axes, [("PCA", pca), ("fair PCA", fpca)], strict=True):
    first = model.transform(X_test)[:, 0]
    for group, color in [("Female", "tab:orange"), ("Male", "tab:blue")]:
        values = first[np.asarray(s_test) == group]
        ax.hist(values, bins=60, density=True, alpha=0.5, color=color, label=group)
        ax.axvline(values.mean(), color=color)
    ax.set_title(f"{name}: first component")
ax.legend()
fig.tight_layout()
plt.show()
