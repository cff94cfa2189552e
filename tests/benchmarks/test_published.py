"""The published numbers (``benchmarks/published.py``): every row and cell, as in the paper."""

import re
from pathlib import Path

import pytest

from benchmarks import published

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT.parent / "shared" / "paper" / "efficient-fair-pca.txt"


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
