"""
Equal opportunity instead of demographic parity
===============================================

For equal opportunity (equal true-positive rates) Section 3.2 of the paper applies fair PCA
to the rows with a positive label only: ``FairPCA(constraint="equal_opportunity")`` with the
labels given to ``fit``. The groups' means then coincide among the positives, and a
downstream classifier's true-positive rates move together, while the selection rates may
still differ (the groups' base rates do).
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
    train_size=10_000,
    test_size=10_000,
    stratify=adult.y,
    random_state=0,
)
encoder = make_preprocessor(adult.X).fit(X_train)
X_train, X_test = encoder.transform(X_train), encoder.transform(X_test)

models = {
    "demographic parity": FairPCA(10).fit(X_train, sensitive_features=s_train),
    "equal opportunity": FairPCA(10, constraint="equal_opportunity", pos_label=1).fit(
        X_train, y_train, sensitive_features=s_train
    ),
}

# %%
# The same logistic regression on each, evaluated on test rows with 95% intervals.
names = ["dp_difference", "eo_difference"]
found = {}
for name, model in models.items():
    classifier = LogisticRegression(max_iter=1000).fit(model.transform(X_train), y_train)
    y_pred = classifier.predict(model.transform(X_test))
    metrics, report = evaluate_fairness(y_test, y_pred, s_test, n_resamples=200, seed=0)
    found[name] = metrics
    print(
        f"{name:19s} accuracy {metrics['accuracy']:.3f}",
        f"DP difference {metrics['dp_difference']:.3f}",
        f"EO difference {metrics['eo_difference']:.3f}",
        f"TPR {report.attributes['sex'].tpr}",
    )

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
x = np.arange(len(names))
for i, (name, metrics) in enumerate(found.items()):
    value = np.array([metrics[m] for m in names])
    err = np.vstack(
        [
            value - [metrics[f"{m}.ci95_low"] for m in names],
            np.array([metrics[f"{m}.ci95_high"] for m in names]) - value,
        ]
    )
    ax.bar(x + (i - 0.5) * 0.35, value, width=0.35, yerr=err, capsize=4, label=f"{name} constraint")
ax.set_xticks(x, ["DP difference", "EO difference"])
ax.set_title("downstream logistic regression, test rows (95% intervals)")
ax.legend()
fig.tight_layout()
plt.show()
