"""The evaluation protocol behind Tables 1-3 (Section 5.1; the setup of Lee et al. 2022).

Facts taken from the authors' analysis code:

* %Var = 100 tr(V^T A V) / tr(A), A the sample covariance of the TEST split (``pct_variance``
  generalises this to any k-dim representation R of the test rows: 100 tr(cov R) / tr(A), which is
  the same number when R = X_test V with orthonormal V).
* MMD^2 on the TEST split, biased V-statistic with a Gaussian kernel exp(-|a-b|^2 / (2 sigma^2));
  sigma^2 = median over train pairs i<j of |V_pca^T (x_i - x_j)|^2 / 2 with V_pca the top-k PCA
  directions of the train split (``lee_sigma``), shared by all methods of a (dataset, split, k).
* Downstream classifiers as in Lee et al.'s MATLAB evaluation (``fitcsvm``: RBF kernel with
  KernelScale 1, i.e. gamma = 1, box constraint 1; linear kernel, box constraint 1) and the
  authors' ``MLPClassifier((10, 5), random_state=999, max_iter=10000)``.
* Lee's protocol fits AND scores the classifiers on the projected TEST split; the proper protocol
  fits on the projected train split and scores on the projected test split.
"""

import os
from pathlib import Path

import numpy as np
from scipy.spatial.distance import pdist
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.neural_network import MLPClassifier
from sklearn.svm import SVC

from fairpca import metrics
from fairpca.datasets import load_lee2022_split

DATASETS = ("adult", "german", "compas")
N_SPLITS = 10
CLASSIFIERS = ("kernel_svm", "linear_svm", "mlp")
PROTOCOLS = ("lee", "proper")


def data_dir(explicit=None):
    """Folder holding ``lee2022-splits`` (FAIRPCA_DATA_DIR, else ../shared/datasets); or None."""
    candidates = [explicit, os.environ.get("FAIRPCA_DATA_DIR")]
    candidates.append(Path(__file__).resolve().parents[1].parent / "shared" / "datasets")
    for candidate in candidates:
        if candidate and (Path(candidate) / "lee2022-splits").is_dir():
            return Path(candidate)
    return None


def load_split(dataset, index, directory=None):
    """One of Lee et al.'s ten 70/30 splits: X_train, y_train, z_train, X_test, y_test, z_test."""
    directory = data_dir(directory)
    if directory is None:
        raise FileNotFoundError(
            "lee2022-splits not found: set FAIRPCA_DATA_DIR to the folder that holds it "
            "(in CI ../shared/datasets)."
        )
    return tuple(
        np.asarray(a, dtype=float) for a in load_lee2022_split(dataset, index, data_dir=directory)
    )


def top_pca_directions(X, k):
    """Top-k principal directions (d x k) of the centred rows of X (MATLAB ``pca``)."""
    Xc = X - X.mean(axis=0)
    _, _, vt = np.linalg.svd(Xc, full_matrices=False)
    return vt[:k].T


def lee_sigma(X_train, k):
    """Kernel bandwidth shared by all methods: sqrt(median_{i<j} |V_pca^T(x_i - x_j)|^2 / 2)."""
    projected = X_train @ top_pca_directions(X_train, k)
    return float(np.sqrt(np.median(pdist(projected, "sqeuclidean")) / 2.0))


def pct_variance(R_test, X_test):
    """100 tr(cov R_test) / tr(cov X_test) (= 100 tr(V^T A V)/tr(A) for R_test = X_test V)."""
    R = np.asarray(R_test, dtype=float)
    return float(100.0 * R.var(axis=0, ddof=1).sum() / X_test.var(axis=0, ddof=1).sum())


def mmd2(R_test, z_test, sigma):
    """Biased MMD^2 V-statistic between the z == 1 and z == 0 rows of R_test (Gaussian kernel)."""
    p1, p0 = R_test[z_test == 1], R_test[z_test == 0]
    gamma = 1.0 / (2.0 * sigma**2)

    def mean_kernel(a, b):
        return float(np.exp(-gamma * euclidean_distances(a, b, squared=True)).mean())

    return mean_kernel(p1, p1) + mean_kernel(p0, p0) - 2.0 * mean_kernel(p1, p0)


def make_classifier(name):
    """The downstream classifier ``name`` configured as in the paper's evaluation."""
    if name == "kernel_svm":
        return SVC(kernel="rbf", gamma=1.0, C=1.0)
    if name == "linear_svm":
        return SVC(kernel="linear", C=1.0)
    if name == "mlp":
        return MLPClassifier(hidden_layer_sizes=(10, 5), random_state=999, max_iter=10000)
    raise ValueError(f"unknown classifier {name!r}; use one of {CLASSIFIERS}")


def accuracy_and_dp(predictions, y, z):
    """Accuracy in % and Delta_DP = |P(yhat=1 | z=1) - P(yhat=1 | z=0)| (``fairpca.metrics``)."""
    acc = 100.0 * metrics.accuracy(y, predictions)
    return acc, metrics.demographic_parity_difference(predictions, z)


def downstream(R_train, y_train, R_test, y_test, z_test, classifiers=CLASSIFIERS):
    """{(protocol, classifier): (acc, dp)} under both protocols."""
    out = {}
    for name in classifiers:
        for protocol in PROTOCOLS:
            fit_X, fit_y = (R_test, y_test) if protocol == "lee" else (R_train, y_train)
            clf = make_classifier(name).fit(fit_X, fit_y)
            out[protocol, name] = accuracy_and_dp(clf.predict(R_test), y_test, z_test)
    return out
