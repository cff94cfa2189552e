"""The paper's figures (``benchmarks/figures.py``): a tiny run writes every figure."""

from benchmarks import figures


def test_figures_quick_run(tmp_path):
    frames = figures.main(["--quick", "--out", str(tmp_path)])
    for png in ("fig1_mixture", "fig2_synthetic_metrics", "fig3_runtime_vs_d",
                "fig7_runtime_vs_k", "fig4_tradeoff", "fig9_runtime_vs_n"):  # fmt: skip
        assert (tmp_path / f"{png}.png").stat().st_size > 1000
    fig1 = frames["fig1"].set_index("method")["covariance_gap"]
    assert fig1.iloc[1] < fig1.iloc[0]  # Fair PCA-S equalises covariances better (Figure 1)
    assert set(frames["fig2"]["method"]) >= {"PCA", "Fair PCA", "INLP"}
