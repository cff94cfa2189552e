"""Streaming fair PCA: partial_fit, fit_chunks and chunk sources equal the in-memory fit."""

import copy
import itertools
import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError

from fairpca import FairPCA
from fairpca import _streaming as st
from fairpca._chunked import ArrayChunks, IterableChunks, ParquetChunks

SEEDS = range(8)
ATOL = 1e-10


def problem(seed, *, n_attributes=1, late=False, eo=False):
    """Random shapes, group-shifted means; ``late`` sorts rows so groups first appear late."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(80, 300))
    d = int(rng.integers(5, 25))
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) / np.sqrt(d) + rng.normal(0, 5, d)
    attributes = []
    for _ in range(n_attributes):
        m = int(rng.integers(2, 4))
        z = rng.integers(0, m, size=n)
        z[: 2 * m] = np.tile(np.arange(m), 2)
        X += rng.normal(scale=2.0, size=(m, d))[z]
        attributes.append(np.array(["a", "b", "c", "d"], dtype=object)[z])
    y = (X[:, 0] + rng.normal(size=n) > np.median(X[:, 0])).astype(int) if eo else None
    if eo:  # at least two positives per group, and positives for the constraint
        for z in attributes:
            for g in np.unique(z):
                y[np.flatnonzero(z == g)[:2]] = 1
    order = np.argsort(attributes[0], kind="stable") if late else rng.permutation(n)
    X = X[order]
    y = None if y is None else y[order]
    S = attributes[0][order] if n_attributes == 1 else np.column_stack(attributes)[order]
    return X, S, y, rng


def random_chunks(rng, n):
    """Random chunk boundaries, including single-row chunks."""
    cuts = np.sort(rng.choice(np.arange(1, n), size=int(rng.integers(1, 8)), replace=False))
    if rng.random() < 0.5:
        cuts = np.unique(np.concatenate([cuts, cuts[:1] + 1]))  # a one-row chunk
    bounds = np.concatenate([[0], cuts, [n]])
    return list(itertools.pairwise(bounds))


def stream(model, X, S, y, chunks):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "FairPCA.partial_fit kept the chunk", UserWarning)
        for a, b in chunks:
            model.partial_fit(X[a:b], None if y is None else y[a:b], sensitive_features=S[a:b])
    return model


def assert_same_fit(streamed, full, atol=ATOL):
    # float32 data are reduced with float32 products in blocks, so two chunkings agree to
    # float32 rounding (amplified by the eigengaps), not to float64 rounding.
    single = full.components_.dtype == np.float32
    atol, rtol = (max(atol, 2e-5), 2e-6) if single else (atol, 1e-12)
    scale = max(1.0, float(np.abs(full.components_).max()))
    np.testing.assert_allclose(streamed.components_, full.components_, atol=atol * scale)
    U, V = streamed.components_.T, full.components_.T
    np.testing.assert_allclose(U @ U.T, V @ V.T, atol=atol)
    np.testing.assert_allclose(streamed.mean_, full.mean_, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(
        streamed.explained_variance_, full.explained_variance_, rtol=100 * rtol, atol=rtol
    )
    np.testing.assert_allclose(streamed.pca_components_, full.pca_components_, atol=10 * atol)
    assert streamed.constraint_rank_ == full.constraint_rank_
    assert streamed.n_samples_ == full.n_samples_
    assert [list(g) for g in streamed.groups_] == [list(g) for g in full.groups_]
    assert streamed.mean_gap_ < 1e-9


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("late", [False, True], ids=["shuffled", "groups-late"])
def test_partial_fit_equals_fit_over_random_chunkings(seed, late):
    X, S, _, rng = problem(seed, late=late)
    k = int(rng.integers(1, X.shape[1] - 3))
    full = FairPCA(k, svd_solver="covariance_eigh").fit(X, sensitive_features=S)
    streamed = stream(FairPCA(k), X, S, None, random_chunks(rng, X.shape[0]))
    assert_same_fit(streamed, full)
    np.testing.assert_allclose(streamed.transform(X), full.transform(X), atol=1e-8)


def test_estimator_is_usable_after_every_chunk_and_waits_for_late_groups():
    X, S, _, _ = problem(3, late=True)  # rows sorted by group: "a" first, "c" last
    model = FairPCA(2)
    first = np.flatnonzero(S[0] != S)[0]
    with pytest.warns(UserWarning, match="single group"):
        model.partial_fit(X[:first], sensitive_features=S[:first])
    with pytest.raises(NotFittedError):
        model.transform(X)
    for a, b in [(first, first + 2), (first + 2, len(X))]:
        model.partial_fit(X[a:b], sensitive_features=S[a:b])
        rows = slice(0, b)
        expected = FairPCA(2, svd_solver="covariance_eigh").fit(X[rows], sensitive_features=S[rows])
        assert_same_fit(model, expected)


def test_new_group_with_one_row_keeps_the_previous_projection():
    X, S, _, _ = problem(4)
    model = FairPCA(2).partial_fit(X[:-3], sensitive_features=S[:-3])
    before = model.components_.copy()
    S_new = S[-3:].copy()
    S_new[0] = "zzz"  # a new group with a single row: its mean is not defined yet
    with pytest.warns(UserWarning, match=r"1 group\(s\) have fewer than 2 rows") as caught:
        model.partial_fit(X[-3:], sensitive_features=S_new)
    assert all("zzz" not in str(w.message) for w in caught)  # by count, never by label
    np.testing.assert_array_equal(model.components_, before)
    model.partial_fit(X[:1] + 0.5, sensitive_features=["zzz"])
    assert list(model.groups_[0])[-1] == "zzz"


# ---------------------------------------------------------------------- shifted moments
def exact_scatter(X):
    X = np.asarray(X, dtype=np.float64)
    centred = X - X.mean(0)
    return centred.T @ centred


@pytest.mark.parametrize("seed", range(4))
def test_shifted_moments_move_the_shift_before_precision_is_lost(seed, monkeypatch):
    """The shift is the mean of the first rows. A tiny first chunk far from the rest would
    make the final subtraction cancel about log10(n) digits; the bound on n ||mean - shift||^2
    re-centres the moments (pairwise rule) first, so float64 accuracy is kept."""
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(100_000, 200_000)), int(rng.integers(2, 6))
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + 1e3 * rng.normal(size=d)
    X[: int(rng.integers(1, 4))] = 0.0  # the first rows, far from all the others
    exact = exact_scatter(X)
    cuts = [0, 3, *sorted(rng.integers(4, n, size=5)), n]

    def streamed():
        moments = st.Moments(d)
        for start, stop in itertools.pairwise(cuts):
            moments.add_rows(X[start:stop])
        return moments

    tol = 1e-12 * np.abs(exact).max()
    guarded = streamed()
    np.testing.assert_allclose(guarded.scatter(), exact, rtol=0, atol=tol)
    np.testing.assert_allclose(guarded.mean, X.mean(0), rtol=1e-13)
    monkeypatch.setattr(st, "SHIFT_MAX_MEAN_RATIO", np.inf)  # the same stream, unguarded
    assert np.abs(streamed().scatter() - exact).max() > tol


@pytest.mark.parametrize(("n", "d"), [(5000, 40), (3001, 200), (700, 7), (400, 300)])
def test_raw_gram_start_gives_the_exact_scatter(n, d):
    """The covariance route starts the moments from X^T X (one syrk, shift 0) when the mean
    does not dominate the spread, and only for the first rows."""
    rng = np.random.default_rng(n)
    X = rng.normal(size=(n, d)) + 3.0
    moments = st.Moments(d)
    assert moments.add_uncentred(X, X.mean(0))
    exact = exact_scatter(X)
    scatter = moments.scatter()
    np.testing.assert_allclose(scatter, exact, rtol=0, atol=1e-12 * np.abs(exact).max())
    np.testing.assert_array_equal(scatter, scatter.T)
    np.testing.assert_allclose(moments.mean, X.mean(0), rtol=1e-13)
    assert not moments.add_uncentred(X, X.mean(0))  # rows were added: shifted blocks instead
    far = st.Moments(d)
    assert not far.add_uncentred(X + 1e4, X.mean(0) + 1e4)  # the mean dominates the spread
    assert far.count == 0


@pytest.mark.parametrize("seed", range(3))
def test_recentring_on_the_mean_keeps_the_moments(seed):
    """Re-centring (scatter(copy=False), merges) moves the shift to the mean by one rank-1
    update U - s s^T / n; the scatter, the mean and further rows stay exact."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(3_000, 6)) @ rng.normal(size=(6, 6)) + rng.normal(size=6)
    moments = st.Moments(6)
    moments.add_rows(X[:1_000] + 1.0)  # the shift (the mean of these) is not the mean of X
    moments.add_rows(X[1_000:2_000] - 1.0)
    assert np.abs(moments.shifted_sum).max() > 100  # the shift is off the mean
    before = moments.scatter(copy=True)
    in_place = moments.scatter(copy=False)
    np.testing.assert_array_equal(moments.shifted_sum, 0.0)
    np.testing.assert_allclose(in_place, before, rtol=0, atol=1e-12 * np.abs(before).max())
    rows = np.vstack([X[:1_000] + 1.0, X[1_000:2_000] - 1.0, X[2_000:]])
    moments.add_rows(X[2_000:])
    exact = exact_scatter(rows)
    np.testing.assert_allclose(moments.scatter(), exact, rtol=0, atol=1e-12 * np.abs(exact).max())
    np.testing.assert_allclose(moments.mean, rows.mean(0), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("seed", SEEDS)
def test_float32_products_are_flushed_merged_pickled_and_mixed_with_float64(seed, monkeypatch):
    monkeypatch.setattr(st, "FLOAT32_FLUSH_ROWS", 40)
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(100, 400)), int(rng.integers(2, 12))
    X = (rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + 100.0).astype(np.float32)
    exact = exact_scatter(X)
    tol = 1e-5 * np.abs(exact).max()
    parts = [st.Moments(d), st.Moments(d)]
    for i, (start, stop) in enumerate(random_chunks(rng, n)):
        block = X[start:stop] if i % 3 else X[start:stop].astype(np.float64)  # some float64
        parts[i % 2].add_rows(block)
        if i == 1:  # pickled (as Dask ships it) with float32 products pending
            parts[1] = pickle.loads(pickle.dumps(parts[1]))
    merged = copy.copy(parts[0])
    merged.merge(parts[1])
    assert merged.count == n
    np.testing.assert_allclose(merged.scatter(), exact, rtol=0, atol=tol)
    np.testing.assert_allclose(merged.mean, X.astype(np.float64).mean(0), rtol=1e-6)
    np.testing.assert_allclose(merged.scatter(copy=False), exact, rtol=0, atol=tol)
    merged.add_rows(X[:7])  # still usable after an in-place read
    np.testing.assert_allclose(
        merged.scatter(), exact_scatter(np.vstack([X, X[:7]])), rtol=0, atol=tol
    )


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("objective", ["positive", "all"])
def test_equal_opportunity_streams(seed, objective):
    X, S, y, rng = problem(seed, eo=True)
    params = dict(constraint="equal_opportunity", eo_objective=objective)
    full = FairPCA(2, svd_solver="covariance_eigh", **params).fit(X, y, sensitive_features=S)
    streamed = stream(FairPCA(2, **params), X, S, y, random_chunks(rng, X.shape[0]))
    assert_same_fit(streamed, full)


@pytest.mark.parametrize("seed", range(4))
def test_multi_attribute_streams(seed):
    X, S, _, rng = problem(seed, n_attributes=2)
    full = FairPCA(2, svd_solver="covariance_eigh").fit(X, sensitive_features=S)
    streamed = stream(FairPCA(2), X, S, None, random_chunks(rng, X.shape[0]))
    assert_same_fit(streamed, full)


@pytest.mark.parametrize("seed", range(4))
def test_fair_pca_s_streams(seed):
    X, S, _, rng = problem(seed)
    d = X.shape[1]
    full = FairPCA(2, equalize_covariance=d // 2).fit(X, sensitive_features=S)
    streamed = stream(
        FairPCA(2, equalize_covariance=d // 2), X, S, None, random_chunks(rng, X.shape[0])
    )
    assert streamed.covariance_rank_ == full.covariance_rank_
    assert_same_fit(streamed, full, atol=1e-9)


def test_categorical_labels_keep_category_order_across_chunks():
    X, S, _, _ = problem(5)
    labels = pd.Categorical(S, categories=["c", "b", "a", "unused"])
    full = FairPCA(2, svd_solver="covariance_eigh").fit(X, sensitive_features=labels)
    streamed = FairPCA(2)
    for a in range(0, len(X), 50):
        streamed.partial_fit(X[a : a + 50], sensitive_features=labels[a : a + 50])
    assert list(full.groups_[0]) == [g for g in ["c", "b", "a"] if g in set(S)]
    assert_same_fit(streamed, full)


def test_float32_chunks_stay_float32_with_shifted_float64_accumulators():
    rng = np.random.default_rng(0)
    n, d = 3000, 12
    z = rng.integers(0, 2, n)
    # a large common offset: float32 sums of squares of the raw rows lose every digit
    X = (1e4 + rng.normal(size=(n, d)) + z[:, None]).astype(np.float32)
    model = FairPCA(3)
    for a in range(0, n, 700):
        model.partial_fit(X[a : a + 700], sensitive_features=z[a : a + 700])
    X64 = X.astype(np.float64)
    exact = (X64 - X64.mean(0)).T @ (X64 - X64.mean(0))
    naive = X.T @ X - n * np.outer(X.mean(0), X.mean(0))  # float32, unshifted
    assert np.abs(naive - exact).max() > 0.1 * np.abs(exact).max()
    # products of the shifted float32 rows, summed in float64: float32 accuracy, no loss
    scatter = model._stream.objective.scatter()
    np.testing.assert_allclose(scatter, exact, rtol=0, atol=1e-6 * np.abs(exact).max())
    np.testing.assert_allclose(model._stream.objective.mean, X64.mean(0), rtol=1e-12)
    assert model.components_.dtype == np.float32
    assert model.transform(X).dtype == np.float32
    full32 = FairPCA(3, svd_solver="covariance_eigh").fit(X, sensitive_features=z)
    np.testing.assert_allclose(model.components_, full32.components_, atol=1e-5)
    full64 = FairPCA(3, svd_solver="covariance_eigh").fit(X64, sensitive_features=z)
    np.testing.assert_allclose(model.components_, full64.components_, atol=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_merging_in_any_tree_order_is_exact(seed):
    X, S, _, rng = problem(seed, n_attributes=2)
    spec = st.StatisticsSpec(n_features=X.shape[1], group_scatter=True)
    parts = [st.chunk_statistics(spec, X[a:b], S[a:b]) for a, b in random_chunks(rng, len(X))]
    while len(parts) > 1:  # merge random neighbours (order of rows is kept)
        i = int(rng.integers(0, len(parts) - 1))
        parts[i : i + 2] = [st.merge_all([parts[i], parts[i + 1]])]
    merged = pickle.loads(pickle.dumps(parts[0]))
    whole = st.chunk_statistics(spec, X, S)
    Xc = X - X.mean(0)
    np.testing.assert_allclose(merged.objective.scatter(), Xc.T @ Xc, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(merged.objective.mean, whole.objective.mean, rtol=1e-13)
    for mine, theirs in zip(merged.ordered_tables(), whole.ordered_tables(), strict=True):
        assert mine.labels == theirs.labels
        np.testing.assert_array_equal(mine.counts, theirs.counts)
        np.testing.assert_allclose(mine.sums, theirs.sums, rtol=1e-12, atol=1e-9)
        for a, b in zip(mine.scatters, theirs.scatters, strict=True):
            np.testing.assert_allclose(a.scatter(), b.scatter(), rtol=1e-11, atol=1e-9)


def fitted_state(model):
    state = {
        k: copy.deepcopy(v) for k, v in vars(model).items() if k.endswith("_") and k != "_stream"
    }
    state["count"] = model._stream.objective.count
    state["scatter"] = model._stream.objective.scatter()
    return state


def assert_state_equal(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(a[key], b[key])
        elif key == "groups_":
            assert [list(g) for g in a[key]] == [list(g) for g in b[key]]
        else:
            assert a[key] == b[key]


def test_bad_chunks_raise_and_leave_the_fitted_state_unchanged():
    X, S, y, _ = problem(6, eo=True)
    model = FairPCA(2).partial_fit(X[:100], sensitive_features=S[:100])
    before = fitted_state(model)
    bad_nan = X[100:150].copy()
    bad_nan[3, 1] = np.nan
    cases = [
        (X[100:150, :-1], S[100:150], ValueError, "features"),
        (bad_nan, S[100:150], ValueError, "NaN"),
        (X[100:150], S[100:149], ValueError, "rows but X has"),
        (X[100:150], np.where(np.arange(50) == 0, None, S[100:150]), ValueError, "missing"),
        (X[100:150].astype(str), S[100:150], TypeError, "numeric"),
        (X[100:150], None, ValueError, "sensitive_features is required"),
        (X[100:150], np.column_stack([S[100:150]] * 2), ValueError, "attribute"),
    ]
    for X_bad, S_bad, error, match in cases:
        with pytest.raises(error, match=match):
            model.partial_fit(X_bad, sensitive_features=S_bad)
        assert_state_equal(fitted_state(model), before)
    model.set_params(constraint="equal_opportunity")
    with pytest.raises(ValueError, match="changed since the first partial_fit"):
        model.partial_fit(X[100:150], y[100:150], sensitive_features=S[100:150])
    model.set_params(constraint="demographic_parity", n_components=X.shape[1])
    with pytest.raises(ValueError, match="n_components"):
        model.partial_fit(X[100:150], sensitive_features=S[100:150])
    assert_state_equal(fitted_state(model), before)
    model.set_params(n_components=2).partial_fit(X[100:], sensitive_features=S[100:])
    assert_same_fit(model, FairPCA(2, svd_solver="covariance_eigh").fit(X, sensitive_features=S))


def test_first_chunk_failure_leaves_estimator_untouched():
    X, S, _, _ = problem(7)
    model = FairPCA(2)
    with pytest.raises(ValueError, match="rows but X has"):
        model.partial_fit(X[:50], sensitive_features=S[:49])
    assert not hasattr(model, "n_features_in_")
    assert not hasattr(model, "_stream")
    with pytest.raises(ValueError, match="y == pos_label"):
        FairPCA(2, constraint="equal_opportunity").partial_fit(X[:50], sensitive_features=S[:50])


def test_fit_and_fit_chunks_restart_and_keep_no_statistics():
    X, S, _, _ = problem(8)
    model = FairPCA(2).partial_fit(X[:60], sensitive_features=S[:60])
    model.fit(X[60:], sensitive_features=S[60:])  # fit starts over...
    model.partial_fit(X[:60], sensitive_features=S[:60])  # ... so this is a new stream
    expected = FairPCA(2, svd_solver="covariance_eigh").fit(X[:60], sensitive_features=S[:60])
    assert_same_fit(model, expected)
    model.fit_chunks(X[:100], sensitive_features=S[:100], chunk_rows=33)
    assert not hasattr(model, "_stream")  # fit_chunks keeps no statistics either...
    model.partial_fit(X[100:], sensitive_features=S[100:])  # ... so this starts a new stream
    expected = FairPCA(2, svd_solver="covariance_eigh").fit(X[100:], sensitive_features=S[100:])
    assert_same_fit(model, expected)


def test_dataframe_chunks_with_sensitive_columns():
    X, S, _, _ = problem(12)
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
    frame.insert(2, "group", S)
    model = FairPCA(2, sensitive_columns="group")
    for a in range(0, len(frame), 70):
        model.partial_fit(frame.iloc[a : a + 70])
    assert list(model.feature_names_in_) == [f"x{i}" for i in range(X.shape[1])]
    expected = FairPCA(2, svd_solver="covariance_eigh").fit(X, sensitive_features=S)
    assert_same_fit(model, expected)
    with pytest.raises(ValueError, match="feature names"):
        model.partial_fit(frame.rename(columns={"x0": "other"}).iloc[:10])
    np.testing.assert_allclose(model.transform(frame), expected.transform(X), atol=1e-8)


def test_pickled_mid_stream_estimator_continues():
    X, S, _, _ = problem(9)
    model = FairPCA(2).partial_fit(X[:90], sensitive_features=S[:90])
    clone = pickle.loads(pickle.dumps(model))
    clone.partial_fit(X[90:], sensitive_features=S[90:])
    model.partial_fit(X[90:], sensitive_features=S[90:])
    np.testing.assert_array_equal(clone.components_, model.components_)


def test_randomized_route_from_statistics_is_close_and_seeded():
    rng = np.random.default_rng(10)
    n, d, k = 2000, 300, 5
    strengths = np.array([20.0, 15, 12, 10, 8, 6, 1, 0.5])
    basis = np.linalg.qr(rng.normal(size=(d, 8)))[0]
    z = rng.integers(0, 2, n)
    X = (rng.normal(size=(n, 8)) * strengths) @ basis.T + rng.normal(scale=0.1, size=(n, d))
    X += np.outer(z, rng.normal(size=d))
    exact = FairPCA(k, svd_solver="covariance_eigh").fit(X, sensitive_features=z)
    fast = FairPCA(k, svd_solver="randomized", random_state=0).fit_chunks(
        X, sensitive_features=z, chunk_rows=1000
    )
    again = FairPCA(k, svd_solver="randomized", random_state=0).fit_chunks(
        X, sensitive_features=z, chunk_rows=700
    )
    np.testing.assert_allclose(fast.components_, again.components_, atol=1e-10)
    np.testing.assert_allclose(fast.explained_variance_, exact.explained_variance_, rtol=1e-8)
    U, V = fast.components_.T, exact.components_.T
    np.testing.assert_allclose(U @ U.T, V @ V.T, atol=1e-6)
    assert fast.mean_gap_ < 1e-10 * np.abs(X).max()


# ---------------------------------------------------------------------- chunk sources
@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    X, S, y, _ = problem(11, eo=True)
    X = X.astype(np.float32)
    root = tmp_path_factory.mktemp("chunks")
    np.save(root / "X.npy", X)
    np.save(root / "S.npy", S.astype(str))
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    frame["group"] = S.astype(str)
    frame["label"] = y
    frame.iloc[:100].to_parquet(root / "one.parquet")
    (root / "dataset").mkdir()
    frame.iloc[:100].to_parquet(root / "dataset" / "part-0.parquet")
    frame.iloc[100:].to_parquet(root / "dataset" / "part-1.parquet")
    return root, X, S.astype(str), y, frame


def test_npy_path_and_memmap_sources_equal_fit(data_files):
    root, X, S, _, _ = data_files
    full = FairPCA(3, svd_solver="covariance_eigh").fit(X, sensitive_features=S)
    from_path = FairPCA(3).fit_chunks(root / "X.npy", sensitive_features=root / "S.npy")
    assert_same_fit(from_path, full)
    memmap = np.load(root / "X.npy", mmap_mode="r")
    chunks = ArrayChunks(memmap, S, chunk_rows=37)
    assert sum(len(c[0]) for c in chunks) == len(X)
    from_memmap = FairPCA(3).fit_chunks(chunks, progress=True)
    assert_same_fit(from_memmap, full)
    assert from_memmap.components_.dtype == np.float32


def test_parquet_sources_equal_fit(data_files):
    root, _, _, _, frame = data_files
    params = dict(n_components=3, sensitive_columns="group")
    full = FairPCA(svd_solver="covariance_eigh", **params).fit(frame)  # "label" is a feature
    streamed = FairPCA(**params).fit_chunks(root / "dataset", chunk_rows=40)
    assert_same_fit(streamed, full)
    assert list(streamed.feature_names_in_) == list(frame.columns.drop("group"))
    eo = dict(constraint="equal_opportunity", eo_objective="all", **params)
    full_eo = FairPCA(svd_solver="covariance_eigh", **eo).fit(
        frame.drop(columns="label"), frame["label"]
    )
    assert_same_fit(FairPCA(**eo).fit_chunks(root / "dataset", y="label"), full_eo)
    source = ParquetChunks(
        root / "one.parquet", sensitive_columns=["group"], feature_columns=["f0", "f1", "f2"]
    )
    small = FairPCA(1).fit_chunks(source)
    assert list(small.feature_names_in_) == ["f0", "f1", "f2"]


def test_iterator_source_equals_fit(data_files):
    _, X, S, y, _ = data_files
    chunks = ((X[a : a + 64], S[a : a + 64], y[a : a + 64]) for a in range(0, len(X), 64))
    params = dict(n_components=2, constraint="equal_opportunity")
    streamed = FairPCA(**params).fit_chunks(chunks)
    full = FairPCA(svd_solver="covariance_eigh", **params).fit(X, y, sensitive_features=S)
    assert_same_fit(streamed, full)
    pairs = IterableChunks([(X[:100], S[:100]), (X[100:], S[100:])], n_rows=len(X))
    assert_same_fit(FairPCA(2).fit_chunks(pairs), FairPCA(2).fit(X, sensitive_features=S))


def test_bad_sources_raise_clear_errors(data_files, tmp_path):
    root, X, S, _, _ = data_files
    with pytest.raises(TypeError, match="every chunk must be a tuple"):
        FairPCA(2).fit_chunks([X[:10]])
    with pytest.raises(ValueError, match="in chunk 1 of the source") as info:
        FairPCA(2).fit_chunks([(X[:50], S[:50]), (X[50:60, :3], S[50:60])])
    assert "features" in str(info.value)
    with pytest.raises(ValueError, match="no rows"):
        FairPCA(2).fit_chunks(iter([]))
    np.save(tmp_path / "fortran.npy", np.asfortranarray(X))
    with pytest.raises(ValueError, match="C-ordered"):
        FairPCA(2).fit_chunks(tmp_path / "fortran.npy", sensitive_features=S)
    with pytest.raises(ValueError, match="sensitive_columns"):
        FairPCA(2).fit_chunks(root / "dataset")
    with pytest.raises(ValueError, match="rows but the data source has"):
        FairPCA(2).fit_chunks(root / "X.npy", sensitive_features=S[:-1])
    with pytest.raises(TypeError, match="Cannot stream"):
        FairPCA(2).fit_chunks(42)
    parts = tmp_path / "parts"  # a data lake's files written at different times
    parts.mkdir()
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(group=S)
    frame.iloc[:100].to_parquet(parts / "a.parquet")
    frame.iloc[100:].drop(columns="f1").to_parquet(parts / "b.parquet")
    with pytest.raises(ValueError, match=r"b\.parquet lacks column\(s\) \['f1'\]"):
        FairPCA(2, sensitive_columns="group").fit_chunks(parts)
    model = FairPCA(2).fit(X, sensitive_features=S)
    before = model.components_.copy()
    with pytest.raises(ValueError, match="NaN"):
        model.fit_chunks([(X[:100], S[:100]), (np.full_like(X[:10], np.nan), S[:10])])
    np.testing.assert_array_equal(model.components_, before)
    assert model.n_features_in_ == X.shape[1]


def test_group_table_order_sorts_labels_seen_out_of_order():
    table = st.GroupTable("s", 2, False)
    table.positions(["b", "a", "c"])
    ordered = table.ordered()
    assert ordered.labels == ["a", "b", "c"]
    assert ordered is not table
    table.positions(["d"])  # appended in sorted place: the order is the identity
    sorted_table = st.GroupTable("s", 2, False)
    sorted_table.positions([1, 2, 5])
    assert sorted_table.ordered() is sorted_table
    mixed = st.GroupTable("s", 2, False)
    mixed.positions(["x", 1])  # not comparable with <: pandas' sort, numbers first
    assert mixed.ordered().labels == [1, "x"]


def test_group_table_in_category_order_is_its_own_order():
    """fit passes its encoding's groups as the categories: that table is already in order,
    sorted or not; labels that differ from the categories' order are still permuted."""
    fitted = st.GroupTable("s", 2, False)
    fitted.positions(["low", "high", "mid"], ["low", "high", "mid"])
    assert fitted.ordered() is fitted
    late = st.GroupTable("s", 2, False)
    late.positions(["mid", "low"], ["low", "high", "mid"])
    assert late.ordered().labels == ["low", "mid"]
    unused = st.GroupTable("s", 2, False)
    unused.positions(["high", "low"], ["low", "high"])
    assert unused.ordered().labels == ["low", "high"]
