"""FairKernelPCA benchmarks: exact route vs scikit-learn KernelPCA, Nystroem at scale, quality.

Usage::

    python -m benchmarks.bench_kernel                 # all three tables (about 10 minutes)
    python -m benchmarks.bench_kernel --quick         # tiny sizes (used by the test suite)
    python -m benchmarks.bench_kernel --only exact    # one table: exact | scale | quality
    python -m benchmarks.bench_kernel --threads 1     # BLAS threads (default: library default)

from the repository root. The paper's literal Algorithm 3 (table 1) is the dense reference
implementation kept with the tests (``tests/library/kernel_reference.py``), so that row needs a
source checkout.

Tables
------
1. exact fit: ``FairKernelPCA(k, approximation="exact").fit`` (the factor-free Gram route)
   beside ``KernelPCA(k, kernel="rbf").fit`` on the same Adult rows (same gamma), median of
   ``--repeats`` alternating runs; the kernel-map routes (pivoted Cholesky factor, eigh map),
   the angle between the default route and ``svd_solver="covariance_eigh"``, and the paper's
   literal Algorithm 3 (null space + the regularised generalised eigenproblem) where it fits
   in time.
2. Nystroem at scale: n = 10k, 40k, 100k Adult-like rows (Adult rows resampled with
   replacement), m landmarks; wall time, peak traced allocations (tracemalloc) and the
   process's peak resident memory, each configuration in a fresh subprocess.
3. quality: Adult, 5,000 training and 5,000 evaluation rows, k = d - 1 (paper, App. C.1),
   an RBF SVC (C = 1 / (2 n 5e-5), paper) on each representation: accuracy and demographic
   parity difference of the exact route and of the approximations, over several draws.

All data come from the bundled Adult copy (``fairpca.datasets.load_adult``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib.util
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from fairpca._kernel import FairKernelPCA
from fairpca._kernel_maps import make_kernel, resolve_gamma
from fairpca.datasets import load_adult, make_preprocessor

ROOT = Path(__file__).resolve().parents[1]
KERNEL_REFERENCE = ROOT / "tests" / "library" / "kernel_reference.py"


# --------------------------------------------------------------------------- data
@functools.lru_cache(maxsize=1)
def adult_matrix():
    """All Adult rows, one-hot + standardised (preprocessor fitted on all rows), and sex."""
    data = load_adult()
    X = make_preprocessor(data.X, min_category_count=1).fit_transform(data.X)
    sex = data.sensitive_codes["sex"].to_numpy()  # the paper's codes
    return np.asarray(X, dtype=np.float64), sex, data.y.to_numpy()


def adult_like(n: int, seed: int = 0):
    """n Adult rows drawn with replacement (more rows than Adult has for n = 100k)."""
    X, sex, _ = adult_matrix()
    rows = np.random.default_rng(seed).choice(len(X), size=n, replace=n > len(X))
    return np.ascontiguousarray(X[rows]), sex[rows]


def time_once(fn) -> float:
    """Wall-clock seconds of one call."""
    return time_and_cpu(fn)[0]


def time_and_cpu(fn) -> tuple[float, float]:
    """Wall-clock and CPU seconds (all threads of this process) of one call. On a shared,
    oversubscribed machine the CPU time is the steadier measure of the work done."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


@contextlib.contextmanager
def frozen_heap():
    """The objects alive before the benchmark are hidden from the garbage collector
    (``gc.freeze``): the collection before each timing then scans only what the benchmark
    created, not every module of the interpreter (a test session's heap makes each full
    collection take a fifth of a second)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


# --------------------------------------------------------------------------- table 1
def kernel_reference():
    """The dense reference implementation of Algorithm 3, loaded from the tests folder by path
    (it is test code, not part of the installed library)."""
    if KERNEL_REFERENCE.exists():
        spec = importlib.util.spec_from_file_location("kernel_reference", KERNEL_REFERENCE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    try:
        from fairpca import _kernel_reference
    except ImportError:
        raise ImportError(
            f"the paper's Algorithm 3 row needs the reference implementation at "
            f"{KERNEL_REFERENCE}, which is not there; run from a source checkout of fairpca "
            f"(git clone), where the tests folder sits beside benchmarks/."
        ) from None
    return _kernel_reference


def paper_algorithm3(X, groups, k, gamma):
    """Algorithm 3 as in the paper: centred K, R, and eigh(A, B + 1e-5 I)."""
    from fairpca._kernel_maps import center_kernel_inplace

    reference = kernel_reference()
    K = make_kernel("rbf", gamma, 3, 1, None)(X)
    center_kernel_inplace(K)
    indicators = (groups[:, None] == np.unique(groups)[None, :]).astype(float)
    return reference.fair_kernel_pca_reference(
        K, indicators - indicators.mean(0), k, regularization=reference.PAPER_REGULARIZATION
    )


def bench_exact(sizes, k: int, repeats: int, paper_max: int, n_landmarks: int) -> None:
    from scipy.linalg import subspace_angles
    from sklearn.decomposition import KernelPCA

    from fairpca._kernel_maps import ExactKernelMap

    print(
        f"\n## exact fit (rbf, gamma='scale', k={k}); wall = median wall seconds of {repeats}, "
        "cpu = CPU seconds (steadier on a shared machine)"
    )
    print(
        f"{'n':>6} {'fair wall':>9} {'KPCA wall':>9} {'ratio':>6} {'fair cpu':>8} "
        f"{'KPCA cpu':>8} {'ratio':>6} {'K+factor cpu':>12} {'eigh-solver cpu':>15} "
        f"{'angle deg':>9} {'var err':>8} {'eigh-map cpu':>12} {'paper Alg3 cpu':>14} "
        f"{f'nystroem m={n_landmarks} cpu':>20}"
    )
    for n in sizes:
        X, sex = adult_like(n, seed=1)
        gamma = resolve_gamma("scale", X)
        fair = FairKernelPCA(k, approximation="exact", random_state=0)
        kpca = KernelPCA(k, kernel="rbf", gamma=gamma, random_state=0)
        fair_t, kpca_t = [], []
        for _ in range(repeats):
            fair_t.append(time_and_cpu(lambda: fair.fit(X, sensitive_features=sex)))  # noqa: B023
            kpca_t.append(time_and_cpu(lambda: kpca.fit(X)))  # noqa: B023
        fair_wall, fair_cpu = np.median(fair_t, axis=0)
        kpca_wall, kpca_cpu = np.median(kpca_t, axis=0)
        kernel = make_kernel("rbf", gamma, 3, 1, None)
        factor = time_and_cpu(lambda: ExactKernelMap(kernel).fit_transform(X))[1]  # noqa: B023
        # Accuracy of the default (randomized) linear solve against an exact eigensolver.
        exact_solver = FairKernelPCA(k, approximation="exact", svd_solver="covariance_eigh")
        solver_cpu = time_and_cpu(lambda: exact_solver.fit(X, sensitive_features=sex))[1]  # noqa: B023
        T_default = fair.fit_transform(X, sensitive_features=sex)
        T_exact = exact_solver.fit_transform(X, sensitive_features=sex)
        angle = np.rad2deg(np.max(subspace_angles(T_default, T_exact)))
        var_err = np.max(np.abs(fair.explained_variance_ / exact_solver.explained_variance_ - 1))
        eigh = paper = "-"
        if n <= paper_max:
            eigh_est = FairKernelPCA(k, approximation="exact", factorization="eigh", random_state=0)
            eigh = f"{time_and_cpu(lambda: eigh_est.fit(X, sensitive_features=sex))[1]:.2f}"  # noqa: B023
            paper = f"{time_and_cpu(lambda: paper_algorithm3(X, sex, k, gamma))[1]:.2f}"  # noqa: B023
        nys = "-"
        if n_landmarks < n:
            nys_est = FairKernelPCA(
                k, approximation="nystroem", n_landmarks=n_landmarks, random_state=0
            )
            nys = f"{time_and_cpu(lambda: nys_est.fit(X, sensitive_features=sex))[1]:.2f}"  # noqa: B023
        print(
            f"{n:>6} {fair_wall:>9.2f} {kpca_wall:>9.2f} {fair_wall / kpca_wall:>6.2f} "
            f"{fair_cpu:>8.2f} {kpca_cpu:>8.2f} {fair_cpu / kpca_cpu:>6.2f} {factor:>12.2f} "
            f"{solver_cpu:>15.2f} {angle:>9.2e} {var_err:>8.1e} {eigh:>12} {paper:>14} {nys:>20}",
            flush=True,
        )


# --------------------------------------------------------------------------- table 2
def _rss_mb(field: str) -> float:
    """VmRSS / VmHWM of this process in MiB (Linux), else the getrusage peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak_rss() -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0); getrusage's peak cannot be reset and
    even survives exec, so it would report the parent's peak."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def scale_worker(n: int, m: int, landmarks: str, k: int) -> dict:
    """One Nystroem fit + transform in this (fresh) process; returns time and memory."""
    X, sex = adult_like(n, seed=2)
    gc.collect()
    _reset_peak_rss()
    base_rss = _rss_mb("VmRSS")
    tracemalloc.start()
    est = FairKernelPCA(
        k, approximation="nystroem", n_landmarks=m, landmarks=landmarks, random_state=0
    )
    start, cpu = time.perf_counter(), time.process_time()
    T = est.fit_transform(X, sensitive_features=sex)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    gap = max(abs(T[sex == g].mean(0) - T.mean(0)).max() for g in np.unique(sex))
    return {
        "n": n,
        "m": m,
        "landmarks": landmarks,
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "traced_peak_mb": peak / 2**20,
        "rss_peak_mb": _rss_mb("VmHWM"),
        "rss_base_mb": base_rss,
        "group_mean_gap": float(gap / abs(T).max()),
    }


def bench_scale(configs, k: int, threads) -> None:
    print(f"\n## Nystroem fit_transform at scale (k={k}; one fresh process per row)")
    print(
        f"{'n':>7} {'m':>5} {'landmarks':>9} {'seconds':>8} {'cpu s':>7} {'traced MB':>9} "
        f"{'RSS MB':>7} {'(base)':>7} {'mean gap':>9}"
    )
    for n, m, landmarks in configs:
        worker = json.dumps([n, m, landmarks, k])
        command = [
            sys.executable, "-m", "benchmarks.bench_kernel", "--worker", worker,
            "--threads", str(threads if threads is not None else 0),
        ]  # fmt: skip
        out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(
            f"{r['n']:>7} {r['m']:>5} {r['landmarks']:>9} {r['seconds']:>8.2f} "
            f"{r['cpu_seconds']:>7.2f} "
            f"{r['traced_peak_mb']:>9.0f} {r['rss_peak_mb']:>7.0f} {r['rss_base_mb']:>7.0f} "
            f"{r['group_mean_gap']:>9.1e}",
            flush=True,
        )


# --------------------------------------------------------------------------- table 3
def bench_quality(n_train: int, seeds, routes) -> None:
    from sklearn.svm import SVC

    from fairpca.metrics import demographic_parity_difference

    data = load_adult()
    print(
        f"\n## quality on Adult: {n_train} train / {n_train} eval rows, RBF SVC on the "
        "representation (mean over draws; diff = route - exact)"
    )
    results: dict[str, list] = {name: [] for name, _ in routes}
    k_used = None
    for seed in seeds:
        rows = np.random.default_rng(seed).permutation(data.n_samples)[: 2 * n_train]
        train, test = rows[:n_train], rows[n_train:]
        prep = make_preprocessor(data.X, min_category_count=1).fit(data.X.iloc[train])
        X_tr = np.asarray(prep.transform(data.X.iloc[train]), dtype=np.float64)
        X_te = np.asarray(prep.transform(data.X.iloc[test]), dtype=np.float64)
        y_tr, y_te = data.y.to_numpy()[train], data.y.to_numpy()[test]
        sex = data.sensitive_codes["sex"].to_numpy()  # the paper's codes
        s_tr, s_te = sex[train], sex[test]
        k_used = X_tr.shape[1] - 1  # k = d - 1 as in the paper (Appendix C.1)
        for name, params in routes:
            est = FairKernelPCA(k_used, random_state=seed, **params)
            start = time.perf_counter()
            R_tr = est.fit_transform(X_tr, sensitive_features=s_tr)
            R_te = est.transform(X_te)
            seconds = time.perf_counter() - start
            svc = SVC(kernel="rbf", C=1.0 / (2 * n_train * 5e-5)).fit(R_tr, y_tr)
            pred = svc.predict(R_te)
            accuracy = float(np.mean(pred == y_te))
            dp = float(demographic_parity_difference(pred, s_te))
            results[name].append((accuracy, dp, seconds))
    print(f"k = {k_used}; draws = {len(list(seeds))}")
    print(
        f"{'route':<22} {'accuracy':>8} {'DP diff':>8} {'acc diff':>9} {'DP diff':>8} "
        f"{'max|acc|':>8} {'max|DP|':>8} {'fit+transform s':>15}"
    )
    exact = np.array(results[routes[0][0]])
    for name, _ in routes:
        r = np.array(results[name])
        d_acc, d_dp = r[:, 0] - exact[:, 0], r[:, 1] - exact[:, 1]
        print(
            f"{name:<22} {r[:, 0].mean():>8.4f} {r[:, 1].mean():>8.4f} "
            f"{100 * d_acc.mean():>+8.2f}pt {d_dp.mean():>+8.4f} "
            f"{100 * np.abs(d_acc).max():>6.2f}pt {np.abs(d_dp).max():>8.4f} "
            f"{r[:, 2].mean():>15.2f}",
            flush=True,
        )


# --------------------------------------------------------------------------- main
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--only", choices=["exact", "scale", "quality"], action="append")
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads (0 = default)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    threads = args.threads or None

    with threadpool_limits(threads), frozen_heap():
        if args.worker:
            print(json.dumps(scale_worker(*json.loads(args.worker))))
            return
        blas = sorted({(i["prefix"], i["num_threads"]) for i in threadpool_info()})
        print(f"BLAS pools (prefix, threads): {blas}")
        tables = args.only or ["exact", "scale", "quality"]
        if args.quick:
            if "exact" in tables:
                bench_exact([300], k=5, repeats=1, paper_max=300, n_landmarks=100)
            if "scale" in tables:
                bench_scale([(2_000, 100, "kmeans++")], 5, threads)
            if "quality" in tables:
                bench_quality(300, seeds=[0], routes=QUALITY_ROUTES_QUICK)
            return
        if "exact" in tables:
            bench_exact(
                [1_000, 2_000, 5_000], k=5, repeats=args.repeats, paper_max=2_000, n_landmarks=500
            )
        if "scale" in tables:
            configs = [
                (10_000, 1_000, "uniform"),
                (40_000, 1_000, "uniform"),
                (40_000, 2_000, "uniform"),
                (40_000, 1_000, "kmeans++"),
                (100_000, 1_000, "uniform"),
                (100_000, 2_000, "uniform"),
            ]
            bench_scale(configs, 10, threads)
        if "quality" in tables:
            bench_quality(5_000, seeds=[0, 1, 2], routes=QUALITY_ROUTES)


QUALITY_ROUTES = [
    ("exact", {"approximation": "exact", "svd_solver": "covariance_eigh"}),
    ("exact, randomized", {"approximation": "exact", "svd_solver": "randomized"}),
    ("nystroem m=1000", {"approximation": "nystroem", "n_landmarks": 1000}),
    ("nystroem m=2000", {"approximation": "nystroem", "n_landmarks": 2000}),
    (
        "nystroem m=1000 k-means++",
        {"approximation": "nystroem", "n_landmarks": 1000, "landmarks": "kmeans++"},
    ),
    ("rff D=2000", {"approximation": "rff", "n_landmarks": 2000}),
]
QUALITY_ROUTES_QUICK = [
    ("exact", {"approximation": "exact", "svd_solver": "covariance_eigh"}),
    ("nystroem m=100", {"approximation": "nystroem", "n_landmarks": 100}),
]

if __name__ == "__main__":
    main()
