"""Pure estimators: transform changes no fitted state, pickles stay small, outputs reproduce."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

from fairpca import FairKernelPCA, FairPCA


def data(n=240, d=12, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 3, n)
    X = rng.normal(size=(n, d)) + 0.8 * z[:, None] * rng.normal(size=d)
    y = rng.integers(0, 2, n)
    return X, y, z


def assert_transform_keeps_pickle(est, X):
    before = pickle.dumps(est)
    est.transform(X)
    assert pickle.dumps(est) == before
    est.set_params(tradeoff=0.5)
    after_set = pickle.dumps(est)
    est.transform(X)
    est.transform(X[:7])
    assert pickle.dumps(est) == after_set


LINEAR = {
    "covariance": dict(svd_solver="covariance_eigh"),
    "full": dict(svd_solver="full"),
    "randomized": dict(svd_solver="randomized", random_state=0),
    "fair-pca-s": dict(equalize_covariance=0.5),
    "equal-opportunity": dict(constraint="equal_opportunity"),
}


@pytest.mark.parametrize("params", LINEAR.values(), ids=LINEAR.keys())
def test_fair_pca_transform_leaves_the_pickle_byte_identical(params):
    X, y, z = data()
    assert_transform_keeps_pickle(FairPCA(3, **params).fit(X, y, sensitive_features=z), X)


def test_streamed_fair_pca_transform_leaves_the_pickle_byte_identical():
    X, _, z = data()
    assert_transform_keeps_pickle(FairPCA(3).fit_chunks(X, sensitive_features=z), X)
    model = FairPCA(3).partial_fit(X[:120], sensitive_features=z[:120])
    assert_transform_keeps_pickle(model.partial_fit(X[120:], sensitive_features=z[120:]), X)


KERNEL = {
    "gram": dict(approximation="exact"),
    "gram-eo": dict(approximation="exact", constraint="equal_opportunity"),
    "cholesky": dict(approximation="exact", factorization="cholesky"),
    "eigh": dict(approximation="exact", factorization="eigh"),
    "nystroem": dict(approximation="nystroem", n_landmarks=60, random_state=0),
    "rff": dict(approximation="rff", n_landmarks=60, random_state=0),
}


@pytest.mark.parametrize("params", KERNEL.values(), ids=KERNEL.keys())
def test_fair_kernel_pca_transform_leaves_the_pickle_byte_identical(params):
    X, y, z = data()
    est = FairKernelPCA(3, **params).fit(X, y, sensitive_features=z)
    assert_transform_keeps_pickle(est, X)


def test_gram_route_tradeoff_after_fit_equals_tradeoff_at_fit():
    X, _, z = data()
    at_fit = FairKernelPCA(3, approximation="exact", tradeoff=0.5).fit(X, sensitive_features=z)
    later = FairKernelPCA(3, approximation="exact").fit(X, sensitive_features=z)
    later.set_params(tradeoff=0.5)
    np.testing.assert_allclose(later.transform(X), at_fit.transform(X), atol=1e-10)
    clone = pickle.loads(pickle.dumps(later))  # the cache is not pickled; recomputed alike
    np.testing.assert_array_equal(clone.transform(X), later.transform(X))


@pytest.mark.parametrize("equalize", [None, 0.5], ids=["fair-pca", "fair-pca-s"])
def test_pickle_after_fit_chunks_is_as_small_as_after_fit(equalize):
    rng = np.random.default_rng(1)
    n, d = 1500, 150
    z = rng.integers(0, 2, n)
    X = rng.normal(size=(n, d)) + z[:, None]
    fitted = FairPCA(5, equalize_covariance=equalize).fit(X, sensitive_features=z)
    chunked = FairPCA(5, equalize_covariance=equalize).fit_chunks(
        X, sensitive_features=z, chunk_rows=400
    )
    size_fit, size_chunks = len(pickle.dumps(fitted)), len(pickle.dumps(chunked))
    assert size_chunks <= 1.5 * size_fit
    assert size_fit < 8 * d * d  # no d x d matrix in the fitted estimator
    streamed = FairPCA(5).partial_fit(X, sensitive_features=z)  # fitting continues: kept
    assert len(pickle.dumps(streamed)) > 8 * d * d


KERNEL_OUTPUT = """
import numpy as np
from threadpoolctl import threadpool_limits
from fairpca import FairKernelPCA


def kernel_pca_output(threads):
    rng = np.random.default_rng(3)
    n = 400
    z = rng.integers(0, 2, n)
    X = rng.normal(size=(n, 6)) + z[:, None]
    with threadpool_limits(threads):
        est = FairKernelPCA(4, tradeoff=0.5).fit(X[:300], sensitive_features=z[:300])
        return np.vstack([est.transform(X[:300]), est.transform(X[300:])])
"""


def kernel_pca_output(threads: int) -> np.ndarray:
    """The output computed in this process, with ``threads`` BLAS threads."""
    namespace = {}
    exec(KERNEL_OUTPUT, namespace)
    return namespace["kernel_pca_output"](threads)


def kernel_pca_output_in_a_fresh_process() -> np.ndarray:
    """The same output computed by a new interpreter, with one BLAS thread."""
    code = KERNEL_OUTPUT + "\nimport sys\nsys.stdout.write(kernel_pca_output(1).tobytes().hex())"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return np.frombuffer(bytes.fromhex(result.stdout), dtype=np.float64).reshape(400, 8)


def test_fair_kernel_pca_output_identical_across_processes_and_blas_threads():
    here, elsewhere, two_threads = (
        kernel_pca_output(1),
        kernel_pca_output_in_a_fresh_process(),
        kernel_pca_output(2),
    )
    assert here.tobytes() == elsewhere.tobytes()  # bit for bit in another process
    # Threaded GEMM edge kernels round the last bit differently: equal to 1e-14 relative.
    np.testing.assert_allclose(two_threads, here, rtol=0, atol=1e-14 * np.abs(here).max())


def module_state() -> dict:
    """The size of every cache and container the library holds at module level (functions
    with a ``cache_info``, dicts, lists and sets, also those on classes)."""
    state = {}
    for name, module in list(sys.modules.items()):
        if name != "fairpca" and not name.startswith("fairpca."):
            continue
        holders = [(name, vars(module))]
        holders += [
            (f"{name}.{k}", vars(v)) for k, v in vars(module).items() if isinstance(v, type)
        ]
        for where, namespace in holders:
            for attr, value in namespace.items():
                if hasattr(value, "cache_info"):
                    state[where, attr] = value.cache_info().currsize
                elif isinstance(value, dict | list | set) and not attr.startswith("__"):
                    state[where, attr] = len(value)
    return state


def test_fits_of_many_shapes_leave_no_module_state_behind():
    """A long-lived process fits many shapes: nothing at module level may grow with them (a
    workspace or basis cached per shape, a registry), so that the hundredth fit of a shape
    costs what the first one does."""
    X, y, z = data()
    FairPCA(3).fit(X, y, sensitive_features=z)  # imports and first-call set-up done
    FairKernelPCA(3, approximation="exact").fit(X, y, sensitive_features=z)
    before = module_state()
    rng = np.random.default_rng(5)
    for n, d in [(40, 5), (300, 31), (90, 140), (700, 64)]:
        X = rng.normal(size=(n, d)) + 0.5 * (np.arange(n) % 3)[:, None]
        y, z = rng.integers(0, 2, n), np.arange(n) % 3
        for params in LINEAR.values():
            FairPCA(3, **params).fit(X, y, sensitive_features=z)
        FairPCA(3).fit(X.astype(np.float32), sensitive_features=z % 2)  # one constraint
        FairPCA(3).partial_fit(X, sensitive_features=z)
        FairKernelPCA(3, approximation="exact").fit(X[:200], sensitive_features=z[:200])
    assert module_state() == before
