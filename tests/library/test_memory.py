"""Memory guard: the bytes of d x d and n x n matrices are checked before they are allocated."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from fairpca import FairKernelPCA, FairPCA, InsufficientMemoryError, _memory


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4GB", 4 * 10**9),
        ("512MiB", 512 * 2**20),
        (" 1.5 kb ", 1500),
        ("1e6", 10**6),
        ("123", 123),
    ],
)
def test_memory_limit_parses_bytes_and_units(text, expected):
    assert _memory.parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["lots", "4 GBs", "-1", ""])
def test_memory_limit_rejects_what_is_not_a_size(text):
    with pytest.raises(ValueError, match="FAIRPCA_MEMORY_LIMIT"):
        _memory.parse_bytes(text)


def test_available_bytes_follows_the_environment(monkeypatch):
    monkeypatch.setenv("FAIRPCA_MEMORY_LIMIT", "3MB")
    assert _memory.available_bytes() == 3_000_000
    monkeypatch.delenv("FAIRPCA_MEMORY_LIMIT")
    assert _memory.available_bytes() > 0  # MemAvailable of this machine


def test_fair_pca_s_too_wide_stops_before_allocating(monkeypatch, shifted_groups):
    X, z = shifted_groups(n=60, d=300)
    monkeypatch.setenv("FAIRPCA_MEMORY_LIMIT", "1MB")
    tracemalloc.start()
    try:
        with pytest.raises(InsufficientMemoryError) as caught:
            FairPCA(2, equalize_covariance=0.5).fit(X, sensitive_features=z)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 300 * 300  # not even one d x d matrix was allocated
    message = str(caught.value)
    for part in ("n_features=300", "2 groups", "MB", "FAIRPCA_MEMORY_LIMIT", "columns"):
        assert part in message
    assert isinstance(caught.value, MemoryError) and isinstance(caught.value, ValueError)


def test_explicit_exact_solver_that_does_not_fit_names_the_fix(monkeypatch, shifted_groups):
    X, z = shifted_groups(n=100, d=400)
    monkeypatch.setenv("FAIRPCA_MEMORY_LIMIT", "1MB")
    with pytest.raises(InsufficientMemoryError, match=r"svd_solver='full'.*n_features=400"):
        FairPCA(3, svd_solver="full").fit(X, sensitive_features=z)
    with pytest.raises(InsufficientMemoryError, match="svd_solver='randomized'"):
        FairPCA(3, svd_solver="covariance_eigh").fit(X, sensitive_features=z)


def test_auto_falls_back_to_the_randomized_solver_when_only_it_fits(monkeypatch, shifted_groups):
    # n < d <= 500: "auto" would take the exact SVD (about 1.3 MB)
    X, z = shifted_groups(n=100, d=400)
    monkeypatch.setenv("FAIRPCA_MEMORY_LIMIT", "1MB")  # the randomized route needs 0.5 MB
    fitted = FairPCA(3, random_state=0).fit(X, sensitive_features=z)
    randomized = FairPCA(3, svd_solver="randomized", random_state=0).fit(X, sensitive_features=z)
    np.testing.assert_array_equal(fitted.components_, randomized.components_)
    assert fitted.mean_gap_ < 1e-10
    monkeypatch.delenv("FAIRPCA_MEMORY_LIMIT")
    exact = FairPCA(3, random_state=0).fit(X, sensitive_features=z)
    assert not np.array_equal(exact.components_, randomized.components_)


def test_streamed_statistics_too_wide_stop_before_allocating(monkeypatch, shifted_groups):
    X, z = shifted_groups(n=60, d=300)
    monkeypatch.setenv("FAIRPCA_MEMORY_LIMIT", "500kB")
    with pytest.raises(InsufficientMemoryError, match="n_features=300"):
        FairPCA(2).partial_fit(X, sensitive_features=z)
    with pytest.raises(InsufficientMemoryError, match="n_features=300"):
        FairPCA(2).fit_chunks(X, sensitive_features=z)


def test_exact_kernel_route_too_large_names_nystroem(monkeypatch, shifted_groups):
    X, z = shifted_groups(n=200, d=5)
    monkeypatch.setenv("FAIRPCA_MEMORY_LIMIT", "500kB")  # exact: 3 x 200^2 x 8 = 960 kB
    with pytest.raises(InsufficientMemoryError, match=r"n_samples=200.*nystroem"):
        FairKernelPCA(2, approximation="exact").fit(X, sensitive_features=z)
    fitted = FairKernelPCA(2, n_landmarks=50, random_state=0).fit(X, sensitive_features=z)
    assert fitted.approximation_ == "nystroem"


def test_fits_that_run_at_once_must_fit_together(monkeypatch):
    monkeypatch.setenv("FAIRPCA_MEMORY_LIMIT", "1GB")
    sizes = {"fair_pca_s": 6e8, "fair_pca": 5e8, "pca": 1e8}
    _memory.require_parallel(sizes, "fix", parallel=1)  # each alone fits
    with pytest.raises(
        InsufficientMemoryError,
        match=r"the fits of fair_pca_s and fair_pca together, as they run at the same time, "
        r"need about 1.1 GB, but only 1.0 GB are available",
    ):
        _memory.require_parallel(sizes, "fix")  # two at once, as the audit runs them
    _memory.require_parallel({"fair_pca_s": 6e8, "pca": 3e8}, "fix")


@pytest.mark.parametrize("tradeoff", [0.0, 0.5])
def test_transform_holds_its_output_and_one_block_of_rows(monkeypatch, shifted_groups, tradeoff):
    """``transform`` fills its output block by block: beside the output it holds one centred
    block of rows, not a centred copy of ``X`` and each part's product (the appended PCA
    features of ``tradeoff > 0`` doubled the output and held three copies of it)."""
    X, z = shifted_groups(n=20_000, d=50)
    model = FairPCA(10, tradeoff=tradeoff).fit(X, sensitive_features=z)
    monkeypatch.setattr(_memory, "BLOCK_BYTES", 1 << 20)
    block = _memory.rows_per_block(50) * 50 * 8
    tracemalloc.start()
    try:
        X_new = model.transform(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < X_new.nbytes + 3 * block < X_new.nbytes + X.nbytes  # not a copy of X
    Xc = X - model.mean_
    expected = Xc @ model.components_.T
    if tradeoff:
        expected = np.hstack([expected, tradeoff * (Xc @ model.pca_components_.T)])
    np.testing.assert_allclose(X_new, expected, rtol=0, atol=1e-12)


def test_group_separation_metrics_copy_no_rows_of_the_representation():
    """MMD^2 on a capped sample of each group and the group-mean gap read the rows in place:
    neither makes a copy of every row (on 250,000 validation rows of 210 features, 420 MB)."""
    from fairpca import metrics as fm

    rng = np.random.default_rng(0)
    R = rng.normal(size=(50_000, 40))
    groups = rng.choice(["a", "b"], len(R), p=[0.3, 0.7])
    tracemalloc.start()
    try:
        fm.mmd_squared(R, groups, sigma=1.0, max_samples=200, random_state=0)
        _, mmd_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        gap = fm.group_mean_gap(R, groups)
        _, gap_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert mmd_peak < R.nbytes / 4 and gap_peak < R.nbytes / 4
    means = [R[groups == g].mean(axis=0) for g in ("a", "b")]
    assert gap == float(np.max(np.abs(means[0] - means[1])))  # the same sums as on a copy
