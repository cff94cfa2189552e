"""Tests for benchmarks/: the published numbers, the protocol, the peers and tiny script runs."""

import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import figures, peers, protocol, published, reproduce_tables, synthetic  # noqa: E402
from fairpca import FairPCA  # noqa: E402
from fairpca import metrics as fp_metrics  # noqa: E402

PAPER = ROOT.parent / "shared" / "paper" / "efficient-fair-pca.txt"
DATA_DIR = protocol.data_dir()
needs_splits = pytest.mark.skipif(
    DATA_DIR is None,
    reason="lee2022-splits not found: set FAIRPCA_DATA_DIR (CI: ../shared/datasets)",
)


# ------------------------------------------------------------------ published numbers
def test_published_tables_have_every_row_and_cell():
    methods = {
        "PCA", "FPCA (0.1, 0.01)", "FPCA (0, 0.01)", "MbF-PCA (1e-3)", "MbF-PCA (1e-6)",
        "INLP", "RLACE", "Fair PCA", "Fair Kernel PCA", "Fair PCA-S (0.5)", "Fair PCA-S (0.85)",
    }  # fmt: skip
    for dataset in ("adult", "german", "compas"):
        for k in (2, 10):
            rows = published.PUBLISHED[dataset][k]
            assert set(rows) == methods
            for name, cells in rows.items():
                assert len(cells) == len(published.COLUMNS)
                na = [c is None for c in cells]
                assert na == (
                    [True, True] + [False] * 6 if name == "Fair Kernel PCA" else [False] * 8
                )
    assert published.published_cell("adult", 2, "Fair PCA", "var") == (6.37, 0.65)
    assert published.published_cell("compas", 10, "RLACE", "mlp_acc") == (68.3, 2.07)
    assert published.published_cell("german", 2, "Fair Kernel PCA", "mmd2") is None


@pytest.mark.skipif(not PAPER.exists(), reason=f"paper text not found at {PAPER}")
def test_published_numbers_equal_the_paper_text():
    """Re-parse Tables 1-3 from the paper text: every (mean, std) equals PUBLISHED."""
    titles = {"Adult Income [": "adult", "German Credit [": "german", "COMPAS [": "compas"}
    dataset, k, seen = None, None, 0
    for line in PAPER.read_text(encoding="utf-8").splitlines():
        if line.startswith("Table 4"):
            break
        dataset = next((v for t, v in titles.items() if line.startswith(t)), dataset)
        parts = line.split("\t")
        if dataset is None or len(parts) != 10 or parts[1] == "Algorithm":
            continue
        k = int(parts[0]) if parts[0].strip() else k
        name = (
            parts[1].strip().replace("( $10^{-3}$ )", "(1e-3)").replace("( $10^{-6}$ )", "(1e-6)")
        )
        cells = []
        for raw in parts[2:]:
            match = re.search(r"([0-9.]+)_\{([0-9.]+)\}", raw)
            cells.append(None if match is None else (float(match[1]), float(match[2])))
        assert tuple(cells) == published.PUBLISHED[dataset][k][name], (dataset, k, name)
        seen += 1
    assert seen == 66


def test_compare_cell_statuses():
    assert reproduce_tables.compare_cell(6.3712, 0.6549, (6.37, 0.65), 2) == "match"
    assert reproduce_tables.compare_cell(6.9, 0.1, (6.37, 0.65), 2) == "within"
    assert reproduce_tables.compare_cell(7.1, 0.1, (6.37, 0.65), 2) == "differs"
    assert reproduce_tables.compare_cell(0.004, 0.0, (0.0, 0.0), 2) == "match"
    assert reproduce_tables.compare_cell(np.nan, 0.0, None, 2) is None


# ------------------------------------------------------------------ protocol
def _two_group_data(seed, n=120, d=7):
    rng = np.random.default_rng(seed)
    z = (rng.random(n) < 0.4).astype(int)
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + 1.5 * z[:, None] * rng.normal(size=d)
    return X, z


@pytest.mark.parametrize("seed", range(3))
def test_protocol_metrics_agree_with_fairpca_metrics(seed):
    X, z = _two_group_data(seed)
    k = 3
    V = protocol.top_pca_directions(X, k)
    sigma = protocol.lee_sigma(X, k)
    assert sigma == pytest.approx(fp_metrics.median_heuristic_sigma(X @ V), rel=1e-12)
    R = X @ V
    assert protocol.mmd2(R, z, sigma) == pytest.approx(
        fp_metrics.mmd_squared(R, z, sigma=sigma), rel=1e-10, abs=1e-12
    )
    A = np.cov(X.T)
    expected = 100 * np.trace(V.T @ A @ V) / np.trace(A)
    assert protocol.pct_variance(R, X) == pytest.approx(expected, rel=1e-10)


def test_accuracy_and_dp():
    acc, dp = protocol.accuracy_and_dp(
        np.array([1, 0, 1, 1]), np.array([1, 0, 0, 1]), np.array([1, 1, 0, 0])
    )
    assert acc == 75.0
    assert dp == 0.5


# ------------------------------------------------------------------ peers
@pytest.mark.parametrize("seed", range(3))
def test_fair_pca_equals_pca_after_mean_gap_erasure(seed):
    X, z = _two_group_data(seed)
    k = 3
    fair = FairPCA(n_components=k).fit(X, sensitive_features=z).components_
    erased = peers.MeanGapProjection(n_components=k).fit(X, z).components_
    assert reproduce_tables.subspace_gap(fair, erased) < 1e-10


@pytest.mark.parametrize("seed", range(3))
def test_inlp_leaves_an_orthonormal_k_dim_basis_orthogonal_to_removed_directions(seed):
    X, z = _two_group_data(seed)
    model = peers.INLP(n_components=2).fit(X, z)
    U, B = model.components_, model.removed_directions_
    assert U.shape == (2, X.shape[1]) and B.shape == (X.shape[1] - 2, X.shape[1])
    np.testing.assert_allclose(U @ U.T, np.eye(2), atol=1e-10)
    np.testing.assert_allclose(B @ B.T, np.eye(len(B)), atol=1e-10)
    np.testing.assert_allclose(U @ B.T, 0.0, atol=1e-10)
    # one iteration removes exactly the first classifier's direction
    one = peers.INLP(n_components=2, n_iterations=1).fit(X, z)
    assert one.n_iterations_ == 1 and one.components_.shape == (2, X.shape[1])


def test_correlation_remover_equalises_training_group_means():
    X, z = _two_group_data(0)
    model = peers.CorrelationRemoverPCA(n_components=3).fit(X, z)
    R = model.transform(X, z)
    np.testing.assert_allclose(R[z == 1].mean(0), R[z == 0].mean(0), atol=1e-10)


def test_leace_skips_with_a_message_when_torch_is_absent():
    ok, reason = peers.leace_available()
    if ok:
        X, z = _two_group_data(0)
        R = peers.LeacePCA(n_components=2).fit(X, z).transform(X)
        np.testing.assert_allclose(R[z == 1].mean(0), R[z == 0].mean(0), atol=1e-8)
        orth = peers.LeacePCA(n_components=2, method="orth").fit(X, z).pca_.components_
        fair = FairPCA(n_components=2).fit(X, sensitive_features=z).components_
        assert reproduce_tables.subspace_gap(orth, fair) < 1e-8
    else:
        assert "LEACE skipped" in reason and "leace" in reason
        with pytest.raises(ImportError, match="LEACE skipped"):
            peers.LeacePCA(n_components=2).fit(*_two_group_data(0))


def test_exponentiated_gradient_rejects_unknown_constraint():
    with pytest.raises(ValueError, match="demographic_parity"):
        peers.exponentiated_gradient(None, "parity")


# ------------------------------------------------------------------ synthetic data
def test_lee_synthetic_splits_are_seeded_and_sized():
    a = synthetic.lee_synthetic(12, n_splits=2, seed=3, latent_dim=50)
    b = synthetic.lee_synthetic(12, n_splits=2, seed=3, latent_dim=50)
    X_tr, z_tr, X_te, z_te = a[0]
    assert X_tr.shape == (336, 12) and X_te.shape == (144, 12)
    assert (z_tr == 1).sum() == 168 and (z_te == 1).sum() == 72
    np.testing.assert_array_equal(X_tr, b[0][0])
    X, z = synthetic.two_gaussians_figure1(n_per_group=20)
    assert X.shape == (40, 10) and z.sum() == 20


# ------------------------------------------------------------------ the scripts, tiny
@needs_splits
def test_deterministic_cells_match_the_paper():
    """PCA / Fair PCA / Fair PCA-S %Var and MMD^2 on German and COMPAS, all ten splits."""
    frame = reproduce_tables.run(
        ["german", "compas"], range(10), (2, 10),
        reproduce_tables.DETERMINISTIC_METHODS, classifiers=(), n_jobs=1,
    )  # fmt: skip
    means, stds = reproduce_tables.summarise(frame)
    for (dataset, k, name), row in means.iterrows():
        for column in reproduce_tables.DETERMINISTIC_COLUMNS:
            cell = published.published_cell(dataset, k, name, column)
            status = reproduce_tables.compare_cell(
                row[column], stds.loc[(dataset, k, name), column], cell, published.DECIMALS[column]
            )
            assert status == "match", (dataset, k, name, column, row[column], cell)


@needs_splits
def test_reproduce_tables_quick_run(tmp_path):
    reproduce_tables.main(
        ["--quick", "--datasets", "german", "--n-jobs", "1", "--out", str(tmp_path)]
    )
    text = (tmp_path / "tables_quick.md").read_text(encoding="utf-8")
    assert "German Credit (Table 2), k = 2" in text
    assert "MbF-PCA (1e-3)" in text and "*(published)*" in text
    assert "| Fair PCA | " in text and "| INLP | " in text
    assert (tmp_path / "tables_per_split_quick.csv").exists()
    # --methods refits only PCA and keeps every other row of the per-split CSV as written
    before = (tmp_path / "tables_per_split_quick.csv").read_text(encoding="utf-8").splitlines()
    reproduce_tables.main(
        ["--quick", "--datasets", "german", "--n-jobs", "1", "--out", str(tmp_path),
         "--methods", "PCA"]
    )  # fmt: skip
    after = (tmp_path / "tables_per_split_quick.csv").read_text(encoding="utf-8").splitlines()
    assert len(after) == len(before)
    for old, new in zip(before, after, strict=True):
        if ",PCA," not in old:
            assert new == old
    text = (tmp_path / "tables_quick.md").read_text(encoding="utf-8")
    assert "The rows of PCA were regenerated by" in text and "| INLP | " in text


def test_replace_rows_keeps_the_order_and_the_other_methods():
    previous = pd.DataFrame(
        {"dataset": ["a", "a", "b", "b"], "split": [0, 0, 0, 0], "k": [2, 2, 2, 2],
         "method": ["PCA", "INLP", "PCA", "INLP"], "value": [1.0, 2.0, 3.0, 4.0]}
    )  # fmt: skip
    fresh = pd.DataFrame(
        {"dataset": ["c", "b", "a"], "split": [0, 0, 0], "k": [2, 2, 2],
         "method": ["PCA", "PCA", "PCA"], "value": [7.0, 6.0, 5.0]}
    )  # fmt: skip
    merged = reproduce_tables.replace_rows(previous, fresh, ["PCA"])
    assert list(merged["dataset"]) == ["a", "a", "b", "b", "c"]
    assert list(merged["method"]) == ["PCA", "INLP", "PCA", "INLP", "PCA"]
    assert list(merged["value"]) == [5.0, 2.0, 6.0, 4.0, 7.0]


def test_figures_quick_run(tmp_path):
    frames = figures.main(["--quick", "--out", str(tmp_path)])
    for png in ("fig1_mixture", "fig2_synthetic_metrics", "fig3_runtime_vs_d",
                "fig7_runtime_vs_k", "fig4_tradeoff", "fig9_runtime_vs_n"):  # fmt: skip
        assert (tmp_path / f"{png}.png").stat().st_size > 1000
    fig1 = frames["fig1"].set_index("method")["covariance_gap"]
    assert fig1.iloc[1] < fig1.iloc[0]  # Fair PCA-S equalises covariances better (Figure 1)
    assert set(frames["fig2"]["method"]) >= {"PCA", "Fair PCA", "INLP"}
