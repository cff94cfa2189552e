"""Regenerate the paper's figures with our code and the peers, on the same rows.

Run from the repository root (``--quick`` is a seconds-long smoke run)::

    python -m benchmarks.figures                       # all figures
    python -m benchmarks.figures --only fig1 fig2 fig7 # a subset
    python -m benchmarks.figures --quick
    python -m benchmarks.figures --only fig2 --methods "Fair Kernel PCA"   # refresh these rows

With ``--methods`` Figures 2, 3 and 7 fit only the named methods and keep the other methods'
rows from the existing ``fig2.csv`` / ``fig3.csv`` / ``fig7.csv`` in the output folder.

* fig1: Figure 1, Fair PCA vs Fair PCA-S (l = 5) on two Gaussians in R^10, k = 2.
* fig2 / fig3: Figures 2-3 on Lee et al.'s synthetic data (our generator, benchmarks/synthetic.py),
  k = 5, d from 20 to 1000: %Var, MMD^2, linear inseparability and fit runtime vs d.
* fig7: Figure 7, fit runtime vs k at d = 100.
* fig4: Figure 4 / App. C.7, accuracy vs Delta_DP and vs Delta_EO on Adult and Bank Marketing
  (5,000 train / 5,000 test rows per draw): Fair PCA (k = d-1, lambda = (i/10)^3) and
  Fair PCA-S against fairlearn's ExponentiatedGradient, logistic regression and RBF SVC.
* fig9: App. C.7 runtime vs training size (Adult, DP, logistic regression).

PNGs and the numbers behind them (``*.csv``) go to benchmarks/results/.
"""

import argparse
import functools
import time
import warnings
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.svm import SVC
from threadpoolctl import threadpool_limits

from benchmarks import methods, peers, protocol, synthetic
from benchmarks.make_readme import record_timing
from benchmarks.reproduce_tables import replace_rows
from fairpca import metrics

RESULTS = Path(__file__).resolve().parent / "results"
COLORS = {
    "PCA": "black",
    "Fair PCA": "tab:green",
    "Fair PCA-S (0.85)": "tab:cyan",
    "Fair PCA-S (0.5)": "tab:blue",
    "Fair Kernel PCA": "tab:olive",
    "INLP": "tab:orange",
    "LEACE": "tab:purple",
    "CorrelationRemover": "tab:brown",
    "ExponentiatedGradient": "tab:red",
}


def _save(fig, out, name):
    path = Path(out) / name
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- Figure 1
def figure1(out, quick=False):
    from fairpca import FairPCA

    X, z = synthetic.two_gaussians_figure1(n_per_group=200 if quick else 500)
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    rows = []
    for ax, (title, params) in zip(
        axes,
        [
            ("Fair PCA (Section 2)", {}),
            ("Fair PCA-S, l = 5 (Section 3.6)", {"equalize_covariance": 5}),
        ],
        strict=True,
    ):
        R = FairPCA(n_components=2, **params).fit(X, sensitive_features=z).transform(X)
        cov_gap = np.linalg.norm(np.cov(R[z == 0].T) - np.cov(R[z == 1].T))
        rows.append({"method": title, "covariance_gap": cov_gap})
        ax.scatter(R[z == 1, 0], R[z == 1, 1], s=4, color="red", alpha=0.5)
        ax.scatter(R[z == 0, 0], R[z == 0, 1], s=4, color="blue", alpha=0.5)
        ax.set_title(f"{title}\n|Cov0 - Cov1| = {cov_gap:.2f}", fontsize=9)
    fig.tight_layout()
    _save(fig, out, "fig1_mixture.png")
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- Figures 2, 3, 7
SYNTHETIC_METHODS = (
    "PCA",
    "Fair PCA",
    "Fair PCA-S (0.85)",
    "Fair Kernel PCA",
    "INLP",
    "LEACE",
    "CorrelationRemover",
)


def _synthetic_rows(
    d, k, n_splits, inlp_max_dim, latent_dim=synthetic.LATENT_DIM, seed=0, metrics=True,
    method_names=SYNTHETIC_METHODS,
):  # fmt: skip
    rows = []
    splits = synthetic.lee_synthetic(d, n_splits, seed, latent_dim=latent_dim)
    for split, (X_tr, z_tr, X_te, z_te) in enumerate(splits):
        sigma = protocol.lee_sigma(X_tr, k) if metrics else None
        for name in method_names:
            if name == "INLP" and d > inlp_max_dim:
                continue
            try:
                fitted = methods.fit_method(name, X_tr, z_tr, z_tr, k)
            except methods.Unavailable:
                continue
            row = {"d": d, "k": k, "split": split, "method": name}
            row["fit_seconds"] = fitted.fit_seconds
            if metrics:
                R_tr, R_te = fitted.transform(X_tr, z_tr), fitted.transform(X_te, z_te)
                probe = LogisticRegression(max_iter=1000).fit(R_tr, z_tr)
                row["var"] = protocol.pct_variance(R_te, X_te) if fitted.linear else np.nan
                row["mmd2"] = protocol.mmd2(R_te, z_te, sigma) if fitted.linear else np.nan
                row["linear_inseparability"] = float(np.mean(probe.predict(R_te) != z_te))
            rows.append(row)
    return rows


def _keep_other_methods(out, name, frame, method_names, quick):
    """``frame`` plus the rows of the methods not in ``method_names`` from ``out/{name}.csv``."""
    path = Path(out) / f"{name}.csv"
    if quick or set(method_names) == set(SYNTHETIC_METHODS) or not path.exists():
        return frame
    keys = ["d", "k", "split", "method"]
    return replace_rows(pd.read_csv(path), frame, method_names, keys)


def _line_plot(ax, frame, x, y, logy=False):
    stats = frame.groupby(["method", x])[y].agg(["mean", "std"]).reset_index()
    for name in SYNTHETIC_METHODS:
        part = stats[stats["method"] == name].dropna(subset=["mean"])
        if len(part):
            ax.errorbar(
                part[x], part["mean"], yerr=part["std"], label=name, marker="o", ms=3,
                color=COLORS[name], capsize=2,
            )  # fmt: skip
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ticks = sorted(frame[x].unique())
    if len(ticks) > 6:
        ticks = [t for t in ticks if t in (2, 5, 10, 20, 50, 100, 200, 400, 1000)]
    ax.set_xticks(ticks)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(x)


SYNTHETIC_DIMS = (20, 50, 100, 200, 400, 600, 800, 1000)


def figure2(out, quick=False, reuse=False, method_names=SYNTHETIC_METHODS):
    """%Var, MMD^2 and linear inseparability vs d (ten splits per d); with ``reuse`` an
    existing ``out/fig2.csv`` is re-plotted instead of recomputed."""
    path = Path(out) / "fig2.csv"
    if reuse and not quick and path.exists():
        frame = pd.read_csv(path)
    else:
        dims = (20, 50) if quick else SYNTHETIC_DIMS
        latent = 100 if quick else synthetic.LATENT_DIM
        rows = []
        for d in dims:
            rows += _synthetic_rows(
                d, 5, 2 if quick else 10, 50 if quick else 200, latent, method_names=method_names
            )
        frame = _keep_other_methods(out, "fig2", pd.DataFrame(rows), method_names, quick)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (col, title) in zip(
        axes,
        [("var", "%Var (test)"), ("mmd2", "MMD² (test)"),
         ("linear_inseparability", "linear inseparability (test)")],
        strict=True,
    ):  # fmt: skip
        _line_plot(ax, frame, "d", col, logy=(col == "mmd2"))
        ax.set_title(title)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    _save(fig, out, "fig2_synthetic_metrics.png")
    return frame


def _runtime_plot(out, frame, x, title, filename):
    """Fit time (CPU seconds, log scale) of every method against column ``x``."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    _line_plot(ax, frame, x, "fit_seconds", logy=True)
    ax.set_ylabel("fit time [CPU s]")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, out, filename)


def figure3(out, quick=False, method_names=SYNTHETIC_METHODS):
    """Fit time (CPU seconds) vs d, k = 5, three splits per d."""
    dims = (20, 50) if quick else SYNTHETIC_DIMS
    latent = 100 if quick else synthetic.LATENT_DIM
    rows = []
    for d in dims:
        rows += _synthetic_rows(
            d, 5, 1 if quick else 3, 50 if quick else 200, latent, metrics=False,
            method_names=method_names,
        )  # fmt: skip
    frame = _keep_other_methods(out, "fig3", pd.DataFrame(rows), method_names, quick)
    _runtime_plot(out, frame, "d", "Runtime vs d (k = 5)", "fig3_runtime_vs_d.png")
    return frame


def figure7(out, quick=False, method_names=SYNTHETIC_METHODS):
    ks = (2, 5) if quick else (2, 5, 10, 20, 30, 40, 50)
    n_splits = 2 if quick else 10
    d, latent = (30, 100) if quick else (100, synthetic.LATENT_DIM)
    rows = []
    for k in ks:
        rows += _synthetic_rows(
            d, k, n_splits, 1000, latent, metrics=False, method_names=method_names
        )
    frame = _keep_other_methods(out, "fig7", pd.DataFrame(rows), method_names, quick)
    _runtime_plot(out, frame, "k", "Runtime vs k (d = 100)", "fig7_runtime_vs_k.png")
    return frame


# ---------------------------------------------------------------- Figure 4 / C.7
DIFFERENCE_BOUNDS = (0.001, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2)
LAMBDAS = tuple((i / 10) ** 3 for i in range(11))


@functools.lru_cache(maxsize=2)
def _load_raw(name, data_dir=None):
    from fairpca.datasets import load_adult, load_bank

    return load_adult() if name == "adult" else load_bank(data_dir=data_dir)


def load_tabular(name, n_train, n_test, seed, data_dir=None):
    """Adult (sex) or Bank Marketing (age > 40): random train/test rows, one-hot encoded and
    standardized on the training rows (Section 5.2 / App. C.2)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from fairpca.datasets import make_preprocessor

    data = _load_raw(name, data_dir)
    rng = np.random.default_rng(seed)
    order = rng.permutation(data.n_samples)
    train, test = order[:n_train], order[n_train : n_train + n_test]
    prep = make_pipeline(make_preprocessor(data.X, min_category_count=1), StandardScaler())
    X_tr = prep.fit_transform(data.X.iloc[train])
    X_te = prep.transform(data.X.iloc[test]) if len(test) else np.zeros((0, X_tr.shape[1]))
    y, z = data.y.to_numpy(), data.sensitive_codes.iloc[:, 0].to_numpy()  # the paper's codes
    return X_tr, y[train], z[train], X_te, y[test], z[test]


def _classifier(kind, n):
    if kind == "logreg":
        return LogisticRegression(random_state=0, max_iter=10000, C=1 / (2 * n * 0.01))
    return SVC(C=1 / (2 * n * 0.00005))


def _violation(pred, y, z, constraint):
    """Delta_EO or Delta_DP of the predictions (``fairpca.metrics``, Section 5.2)."""
    if constraint == "equal_opportunity":
        return metrics.equal_opportunity_difference(y, pred, z)
    return metrics.demographic_parity_difference(pred, z)


def _fair_pca_curve(X_tr, y_tr, z_tr, X_te, y_te, z_te, constraint, kind, name, lambdas=LAMBDAS):
    from fairpca import FairPCA

    d = X_tr.shape[1]
    k, params = {
        "Fair PCA": (d - 1, {}),
        "Fair PCA-S (0.5)": (d // 4, {"equalize_covariance": 0.5}),
        "Fair PCA-S (0.85)": (d // 2, {"equalize_covariance": 0.85}),
    }[name]
    rows = []
    start = time.process_time()
    model = FairPCA(n_components=k, constraint=constraint, **params)
    model.fit(X_tr, y_tr, sensitive_features=z_tr)
    fit_seconds = time.process_time() - start
    for lam in lambdas:
        start = time.process_time()
        model.set_params(tradeoff=lam)
        clf = _classifier(kind, len(y_tr)).fit(model.transform(X_tr), y_tr)
        seconds = fit_seconds + time.process_time() - start
        pred = clf.predict(model.transform(X_te))
        rows.append((name, lam, np.mean(pred == y_te), _violation(pred, y_te, z_te, constraint),
                     seconds))  # fmt: skip
    return rows


def _expgrad_curve(X_tr, y_tr, z_tr, X_te, y_te, z_te, constraint, kind, bounds):
    rows = []
    for bound in bounds:
        start = time.process_time()
        mitigator = peers.exponentiated_gradient(_classifier(kind, len(y_tr)), constraint, bound)
        with warnings.catch_warnings():  # fairlearn 0.15 vs pandas 3 deprecation noise
            warnings.filterwarnings("ignore", message="Setting a value on a Series via .at")
            mitigator.fit(X_tr, y_tr, sensitive_features=z_tr)
        seconds = time.process_time() - start
        pred = mitigator.predict(X_te, random_state=0)
        rows.append(("ExponentiatedGradient", bound, np.mean(pred == y_te),
                     _violation(pred, y_te, z_te, constraint), seconds))  # fmt: skip
    return rows


# Budget of the shared 2-core machine (the paper: ten draws, all 11 parameters everywhere).
FIG4_DRAWS = 1
SVC_TRAIN_ROWS = 2000  # kernel SVM panels: 2,000 training rows (the paper: 5,000)
SVC_LAMBDAS = LAMBDAS[::2]
SVC_BOUNDS = (0.005, 0.02, 0.2)


def _tradeoff_panel(dataset, draw, constraint, kind, data, quick):
    ours = ("Fair PCA", "Fair PCA-S (0.5)", "Fair PCA-S (0.85)")[: 1 if quick else 3]
    lambdas, bounds, used = LAMBDAS, DIFFERENCE_BOUNDS, data
    if quick:
        lambdas, bounds = LAMBDAS[::5], (0.05,)
    elif kind == "svc":
        lambdas, bounds = SVC_LAMBDAS, SVC_BOUNDS
        used = (*(a[:SVC_TRAIN_ROWS] for a in data[:3]), *data[3:])
    curve = []
    for name in ours:
        curve += _fair_pca_curve(*used, constraint, kind, name, lambdas)
    curve += _expgrad_curve(*used, constraint, kind, bounds)
    return [(dataset, draw, constraint, kind, *r) for r in curve]


FIG4_COLUMNS = ["dataset", "draw", "constraint", "classifier", "method", "parameter",
                "accuracy", "violation", "seconds"]  # fmt: skip


def figure4(out, quick=False, draws=FIG4_DRAWS, data_dir=None, datasets=None, classifiers=None):
    """Trade-off curves; each (dataset, classifier, constraint) panel is stored in
    ``out/fig4_parts/`` and reused, so panels can be computed by separate processes."""
    n = 300 if quick else 5000
    if datasets is None:
        datasets = ["adult"]
        if not quick and protocol.data_dir(data_dir) is not None:
            datasets.append("bank")  # Bank Marketing is read from FAIRPCA_DATA_DIR only
    panels = [
        (c, k) for k in ("logreg", "svc") for c in ("demographic_parity", "equal_opportunity")
    ]
    if quick:
        panels = panels[:1]
    parts = Path(out) / "fig4_parts"
    frames = []
    for dataset in datasets:
        for constraint, kind in panels:
            path = parts / f"{dataset}_{kind}_{constraint}.csv"
            if not quick and path.exists():
                frames.append(pd.read_csv(path))
                continue
            if classifiers is not None and kind not in classifiers:
                continue
            rows = []
            for draw in range(1 if quick else draws):
                data = load_tabular(dataset, n, n, seed=draw, data_dir=data_dir)
                rows += _tradeoff_panel(dataset, draw, constraint, kind, data, quick)
            frame = pd.DataFrame(rows, columns=FIG4_COLUMNS)
            if not quick:
                parts.mkdir(parents=True, exist_ok=True)
                frame.to_csv(path, index=False, float_format="%.6g")
            frames.append(frame)
    frame = pd.concat(frames, ignore_index=True)
    datasets = list(dict.fromkeys(frame["dataset"]))
    fig, axes = plt.subplots(
        len(datasets), len(panels), figsize=(4 * len(panels), 3.6 * len(datasets)), squeeze=False
    )
    for i, dataset in enumerate(datasets):
        for j, (constraint, kind) in enumerate(panels):
            ax = axes[i, j]
            part = frame[
                (frame.dataset == dataset) & (frame.constraint == constraint)
                & (frame.classifier == kind)
            ]  # fmt: skip
            if part.empty:
                ax.set_visible(False)
                continue
            stats = part.groupby(["method", "parameter"])[["accuracy", "violation"]].mean()
            for name in stats.index.get_level_values(0).unique():
                s = stats.loc[name]
                ax.plot(s["violation"], s["accuracy"], marker="o", ms=3, label=name,
                        color=COLORS[name])  # fmt: skip
            metric = "ΔDP" if constraint == "demographic_parity" else "ΔEO"
            ax.set_xlabel(metric)
            ax.set_ylabel("accuracy")
            ax.set_title(f"{dataset}: {kind}, {metric}", fontsize=9)
    next(ax for ax in axes.flat if ax.get_visible()).legend(fontsize=7)
    fig.tight_layout()
    _save(fig, out, "fig4_tradeoff.png")
    return frame


def figure9(out, quick=False, bounds=(0.01,)):
    sizes = (300,) if quick else (1000, 5000, 10000, 20000, 40000)
    lambdas = LAMBDAS[::5]  # seconds per lambda hardly depend on lambda
    rows = []
    for n in sizes:
        data = load_tabular("adult", n, 0, seed=0)
        X_tr, y_tr, z_tr = data[:3]
        for name in ("Fair PCA", "Fair PCA-S (0.5)"):
            curve = _fair_pca_curve_timing(X_tr, y_tr, z_tr, name, lambdas)
            rows += [(n, name, s) for s in curve]
        for bound in bounds:
            start = time.process_time()
            mitigator = peers.exponentiated_gradient(
                _classifier("logreg", n), "demographic_parity", bound
            )
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Setting a value on a Series via .at")
                mitigator.fit(X_tr, y_tr, sensitive_features=z_tr)
            rows.append((n, "ExponentiatedGradient", time.process_time() - start))
    frame = pd.DataFrame(rows, columns=["n_train", "method", "seconds"])
    fig, ax = plt.subplots(figsize=(5.5, 4))
    stats = frame.groupby(["method", "n_train"])["seconds"].agg(["mean", "std"]).reset_index()
    for name in stats["method"].unique():
        part = stats[stats["method"] == name]
        ax.errorbar(part["n_train"], part["mean"], yerr=part["std"], marker="o", ms=3,
                    label=name, color=COLORS[name], capsize=2)  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("training rows")
    ax.set_ylabel("fit time incl. logistic regression [s]")
    ax.set_title("Adult, DP, logistic regression")
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, out, "fig9_runtime_vs_n.png")
    return frame


def _fair_pca_curve_timing(X_tr, y_tr, z_tr, name, lambdas=LAMBDAS):
    """Seconds for fit + logistic regression, one per lambda (as in the authors' script)."""
    from fairpca import FairPCA

    d = X_tr.shape[1]
    k, params = (d - 1, {}) if name == "Fair PCA" else (d // 4, {"equalize_covariance": 0.5})
    out = []
    for lam in lambdas:
        start = time.process_time()
        model = FairPCA(n_components=k, tradeoff=lam, **params)
        R = model.fit(X_tr, sensitive_features=z_tr).transform(X_tr)
        _classifier("logreg", len(y_tr)).fit(R, y_tr)
        out.append(time.process_time() - start)
    return out


FIGURES = {
    "fig1": figure1,
    "fig2": figure2,
    "fig3": figure3,
    "fig7": figure7,
    "fig4": figure4,
    "fig9": figure9,
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke run)")
    parser.add_argument("--only", nargs="+", choices=sorted(FIGURES), default=sorted(FIGURES))
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--reuse", action="store_true", help="fig2: re-plot out/fig2.csv")
    parser.add_argument("--fig4-datasets", nargs="+", default=None, help="fig4: these only")
    parser.add_argument("--fig4-classifiers", nargs="+", default=None, choices=["logreg", "svc"])
    parser.add_argument(
        "--methods", nargs="+", default=list(SYNTHETIC_METHODS), choices=SYNTHETIC_METHODS,
        help="fig2, fig3, fig7: fit only these; keep the other rows from the existing CSV",
    )  # fmt: skip
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "_quick" if args.quick else ""
    frames = {}
    # fit times are CPU seconds (time.process_time) with single-threaded BLAS: the shared
    # development machine is heavily loaded, so wall time would mostly measure the queue
    limits = threadpool_limits(limits=1)
    for name in args.only:
        start = time.perf_counter()
        options = {"reuse": args.reuse} if name == "fig2" else {}
        if name in ("fig2", "fig3", "fig7"):
            options["method_names"] = tuple(args.methods)
        if name == "fig4":
            options = {"datasets": args.fig4_datasets, "classifiers": args.fig4_classifiers}
        frame = FIGURES[name](out, quick=args.quick, **options)
        frame.to_csv(out / f"{name}{suffix}.csv", index=False, float_format="%.6g")
        frames[name] = frame
        seconds = time.perf_counter() - start
        partial = set(options.get("method_names", SYNTHETIC_METHODS)) != set(SYNTHETIC_METHODS)
        if not args.quick and not options.get("reuse") and not partial:
            record_timing(out, name, seconds)
        print(f"{name}: {seconds:.1f} s", flush=True)
    limits.restore_original_limits()
    return frames


if __name__ == "__main__":
    main()
