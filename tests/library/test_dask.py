"""Fair PCA on Dask collections, on one cluster for the whole module: a scheduler reached by
address (TCP) and two single-threaded worker processes started by the ``dask worker`` CLI, as
on other machines, so every block's statistics are computed in another process and travel
pickled."""

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from fairpca import FairPCA

da = pytest.importorskip("dask.array", reason="the optional extra fairpca[dask] is needed")
dd = pytest.importorskip("dask.dataframe", reason="the optional extra fairpca[dask] is needed")
distributed = pytest.importorskip("distributed", reason="the optional extra fairpca[dask]")

ATOL = 1e-10


@pytest.fixture(scope="module")
def cluster_address(tmp_path_factory):
    """A TCP scheduler (in this process: it only routes) and two ``dask worker`` processes
    with one thread each; yields the scheduler's address. Started once (each worker process
    imports Dask, seconds on a busy machine) and killed at the end: the workers hold no
    state worth a graceful shutdown, which takes seconds more."""
    scratch = str(tmp_path_factory.mktemp("dask-workers"))
    python, host = [sys.executable, "-m"], ["--host", "127.0.0.1", "--no-dashboard"]
    worker_options = ["--no-nanny", "--nthreads", "1", "--memory-limit", "1GB"]
    with distributed.LocalCluster(
        n_workers=0,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",  # its HTTP server (always started) on a free port
    ) as scheduler:
        workers = [
            subprocess.Popen(
                [*python, "distributed.cli.dask_worker", scheduler.scheduler_address, *host,
                 *worker_options, "--local-directory", scratch],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(2)
        ]  # fmt: skip
        try:
            yield scheduler.scheduler_address
        finally:
            for process in workers:
                process.kill()
                process.wait(timeout=30)


@pytest.fixture(scope="module")
def client(cluster_address):
    """The client of the module's cluster, connected by address, as to a remote one."""
    with distributed.Client(cluster_address, timeout=60) as client, client.as_current():
        client.wait_for_workers(2, timeout=120)
        yield client


def problem(seed, n=600, d=12, eo=False):
    rng = np.random.default_rng(seed)
    z = rng.choice(np.array(["f", "m", "x"], dtype=object), size=n, p=[0.5, 0.4, 0.1])
    w = rng.integers(0, 2, n)
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + 3.0
    X += (z == "f")[:, None] * rng.normal(size=d) + w[:, None] * rng.normal(size=d)
    y = (X[:, 0] > np.median(X[:, 0])).astype(int) if eo else None
    return X, z, w, y


def assert_same_fit(got, expected, atol=ATOL):
    np.testing.assert_allclose(got.components_, expected.components_, atol=atol)
    np.testing.assert_allclose(got.mean_, expected.mean_, rtol=1e-12)
    np.testing.assert_allclose(got.explained_variance_, expected.explained_variance_, rtol=1e-10)
    assert [list(g) for g in got.groups_] == [list(g) for g in expected.groups_]
    assert got.n_features_in_ == expected.n_features_in_


@pytest.mark.parametrize("seed", range(3))
def test_dask_array_equals_in_memory_fit(client, seed):
    X, z, _, _ = problem(seed)
    full = FairPCA(3, svd_solver="covariance_eigh").fit(X, sensitive_features=z)
    # uneven row blocks and two column blocks (rechunked to whole rows)
    X_dask = da.from_array(X, chunks=((100, 250, 1, 249), (5, 7)))
    got = FairPCA(3).fit(X_dask, sensitive_features=z)
    assert_same_fit(got, full)
    z_dask = da.from_array(z, chunks=77)  # blocks that do not line up with X's
    assert_same_fit(FairPCA(3).fit(X_dask, sensitive_features=z_dask), full)
    out = got.transform(X_dask)
    assert isinstance(out, da.Array)
    np.testing.assert_allclose(out.compute(), full.transform(X), atol=1e-8)


def test_dask_dataframe_with_sensitive_columns_and_eo(client):
    X, z, w, y = problem(3, eo=True)
    frame = pd.DataFrame(X, columns=[f"p{i}" for i in range(X.shape[1])])
    frame["sex"], frame["race"] = z, w
    ddf = dd.from_pandas(frame, npartitions=5)
    params = dict(n_components=2, sensitive_columns=["sex", "race"])
    full = FairPCA(svd_solver="covariance_eigh", **params).fit(frame)
    got = FairPCA(**params).fit(ddf)
    assert_same_fit(got, full)
    assert list(got.feature_names_in_) == list(frame.columns[:-2])
    out = got.transform(ddf)
    assert list(out.columns) == ["fairpca0", "fairpca1"]
    np.testing.assert_allclose(out.compute().to_numpy(), full.transform(frame), atol=1e-8)
    for objective in ("positive", "all"):
        eo = dict(constraint="equal_opportunity", eo_objective=objective, **params)
        y_series = pd.Series(y, name="y")
        expected = FairPCA(svd_solver="covariance_eigh", **eo).fit(frame, y_series)
        assert_same_fit(FairPCA(**eo).fit(ddf, dd.from_pandas(y_series, npartitions=5)), expected)
        assert_same_fit(FairPCA(**eo).fit(ddf, y), expected)  # in-memory y, split per partition


def test_dask_dataframe_with_dask_series_groups_and_fair_pca_s(client):
    X, z, _, _ = problem(4)
    frame = pd.DataFrame(X)
    frame.columns = [f"c{i}" for i in range(X.shape[1])]
    ddf = dd.from_pandas(frame, npartitions=3)
    groups = dd.from_pandas(pd.Series(z, name="sex"), npartitions=4)  # other partitions
    params = dict(n_components=2, equalize_covariance=6)
    full = FairPCA(**params).fit(frame, sensitive_features=z)
    got = FairPCA(**params).fit(ddf, sensitive_features=groups)
    assert got.covariance_rank_ == full.covariance_rank_ == 6
    assert_same_fit(got, full, atol=1e-9)


def test_bad_block_raises_and_leaves_fitted_state(client):
    X, z, _, _ = problem(5)
    model = FairPCA(2).fit(X, sensitive_features=z)
    before = model.components_.copy()
    bad = X.copy()
    bad[450, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        model.fit(da.from_array(bad, chunks=(100, -1)), sensitive_features=z)
    np.testing.assert_array_equal(model.components_, before)
    with pytest.raises(ValueError, match="rows but X has"):
        model.fit(da.from_array(X, chunks=(100, -1)), sensitive_features=z[:-1])
    with pytest.raises(ValueError, match="sensitive_features is required"):
        model.fit(da.from_array(X, chunks=(100, -1)))
    with pytest.raises(ValueError, match="features"):
        model.transform(da.from_array(X[:, :5], chunks=(100, -1)))
    with pytest.raises(TypeError, match="in-memory chunks"):
        model.partial_fit(da.from_array(X, chunks=(100, -1)), sensitive_features=z)
    np.testing.assert_array_equal(model.components_, before)


def test_importing_fairpca_does_not_import_dask():
    code = "import sys, fairpca; print('dask' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


def test_blocks_are_computed_in_the_worker_processes(client):
    """Every block is computed in one of the two worker processes, not here."""
    here = os.getpid()
    workers = set(client.run(os.getpid).values())
    assert len(workers) == 2 and here not in workers
    X_dask = da.from_array(problem(6)[0], chunks=(100, -1))
    computed_in = X_dask.map_blocks(lambda block: np.full((1, 1), os.getpid()), chunks=(1, 1))
    assert set(computed_in.compute().ravel()) == workers


def test_dataframe_fit_with_dask_labels_for_fair_pca_s_and_equal_opportunity(client):
    X, z, w, y = problem(6, eo=True)
    frame = pd.DataFrame(X, columns=[f"p{i}" for i in range(X.shape[1])])
    frame["sex"], frame["race"] = z, w
    params = dict(n_components=3, sensitive_columns=["sex", "race"])
    full = FairPCA(svd_solver="covariance_eigh", **params).fit(frame)
    eo = dict(constraint="equal_opportunity", equalize_covariance=8, **params)
    full_eo = FairPCA(**eo).fit(frame, y)
    ddf = dd.from_pandas(frame, npartitions=6)
    got = FairPCA(**params).fit(ddf)
    assert_same_fit(got, full)
    out = got.transform(ddf).compute().to_numpy()
    np.testing.assert_allclose(out, full.transform(frame), atol=1e-8)
    got_eo = FairPCA(**eo).fit(ddf, dd.from_pandas(pd.Series(y, name="y"), npartitions=4))
    assert_same_fit(got_eo, full_eo, atol=1e-9)


def test_estimators_sharing_statistics_are_fitted_from_one_pass(client, monkeypatch):
    """A grid of k, Fair PCA-S and a trade-off lambda from one pass over the collection
    (equal opportunity, other rows, from a second): each fit equals its own."""
    from fairpca import _dask
    from fairpca._fair_pca import fit_from_shared_statistics

    X, z, _, y = problem(5, eo=True)
    frame = pd.DataFrame(X, columns=[f"p{i}" for i in range(X.shape[1])]).assign(sex=z)
    ddf = dd.from_pandas(frame, npartitions=4)
    params = [dict(n_components=2), dict(n_components=4, tradeoff=0.5),
              dict(n_components=3, equalize_covariance=6),
              dict(n_components=2, constraint="equal_opportunity")]  # fmt: skip
    passes = []
    original = _dask.fit_statistics
    monkeypatch.setattr(_dask, "fit_statistics", lambda *a: passes.append(1) or original(*a))
    estimators = [FairPCA(sensitive_columns=["sex"], **p) for p in params]
    fit_from_shared_statistics(estimators, ddf, dd.from_pandas(pd.Series(y), npartitions=4))
    assert len(passes) == 2
    monkeypatch.undo()
    for got, p in zip(estimators, params, strict=True):
        solver = {} if "equalize_covariance" in p else {"svd_solver": "covariance_eigh"}
        expected = FairPCA(sensitive_columns=["sex"], **solver, **p)
        assert_same_fit(got, expected.fit(frame, y), atol=1e-9)
        np.testing.assert_allclose(got.pca_components_, expected.pca_components_, atol=1e-8)
