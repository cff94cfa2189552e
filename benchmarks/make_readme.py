"""Assemble benchmarks/README.md from the generated results (tables, figure CSVs, PNGs).

python -m benchmarks.make_readme
"""

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

INTRO = """# Benchmarks: the paper's experiments, regenerated, beside the published numbers

Everything here is produced by the scripts in this folder, run as modules from the repository
root, with `FAIRPCA_DATA_DIR` pointing at the shared data (`../shared/datasets` in CI; the Lee et
al. splits, COMPAS and Bank Marketing are read from there and never copied into the repository).

| what | command | wall time here |
|---|---|---|
| Tables 1-3 (10 splits, k = 2, 10) | `python -m benchmarks.reproduce_tables` | {tables_time} |
| Figures 1, 2, 3, 4, 7, 9 | `python -m benchmarks.figures [--only fig1 ...]` | {figures_time} |
| this README | `python -m benchmarks.make_readme` | seconds |
| smoke runs (CI; every script with `--quick`) | `pytest tests/benchmarks` \
| {tests_time} |

Long runs can be split: `reproduce_tables --cache DIR` stores every finished (dataset, split),
several runners with different `--splits` can share one cache, and
`reproduce_tables --cache DIR --cached-downstream-only` assembles the tables from it.
`figures --only fig4 --fig4-datasets adult --fig4-classifiers svc` computes single Figure 4
panels, stored under `fig4_parts/` and reused.

The committed results are checked against the code: `tests/benchmarks/test_committed_results.py`
recomputes one row per method of `results/tables_per_split.csv` (COMPAS split 0, k = 2) and
fails when the file is stale. After a change of a method's defaults, regenerate only that
method's rows, `python -m benchmarks.reproduce_tables --methods "Fair Kernel PCA"` (and
`python -m benchmarks.figures --only fig2 fig3 fig7 --methods "Fair Kernel PCA"` for the
figures), which keeps the other methods' rows from the CSV files, then this README.

LEACE needs torch and `concept-erasure` (optional extra: `pip install 'fairpca[leace]'`); without
them its rows and cross-checks are skipped with a message. Timings were measured on the shared
2-core development machine while other jobs were running, so absolute seconds are noisy; the
ratios between methods measured in the same process on the same rows are the meaningful part.

Modules: `published.py` (the paper's numbers, transcribed and re-checked against the paper text
by a test), `protocol.py` (the evaluation protocol of Tables 1-3), `methods.py` (the
representations compared), `peers.py` (INLP, LEACE, CorrelationRemover, ExponentiatedGradient,
mean-gap projection), `synthetic.py` (our generator for Lee et al.'s synthetic data and for
Figure 1), `reproduce_tables.py`, `figures.py`, `make_readme.py`. `bench_kernel.py`
(`python -m benchmarks.bench_kernel`), `bench_streaming.py` (`python -m
benchmarks.bench_streaming`) and `bench_fit.py` are separate scaling benchmarks (see their own
docstrings). `python -m benchmarks.bench_fit --threads 1` times `FairPCA.fit` beside
`PCA.fit` on the same rows in the same process; its goal is a CPU ratio of at most 1.1 on every
cell whose fits take 20 ms or more and at most 1.3 on the smaller cells.
`python -m benchmarks.bench_audit` runs the default audit at 10,000 to 1,000,000 rows (wall
time by stage, peak RSS, growth: `results/bench_audit.md`); `python -m benchmarks.verdicts`
runs the audit's verdict on public R tables and the bundled data through the command line
(`results/verdicts_after.md`, beside the code before the verdict work in `verdicts_before.md`).
"""


def _minutes(seconds):
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def record_timing(results, name, seconds):
    """Store the wall time of one generated artefact in results/timings.csv."""
    path = Path(results) / "timings.csv"
    table = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["name", "seconds"])
    table = table[table["name"] != name]
    table.loc[len(table)] = [name, round(float(seconds), 1)]
    table.sort_values("name").to_csv(path, index=False)


def _timings(results):
    path = Path(results) / "timings.csv"
    if not path.exists():
        return {}
    table = pd.read_csv(path).set_index("name")["seconds"]
    out = {}
    if "tables" in table:
        out["tables"] = _minutes(table["tables"])
    figs = [n for n in table.index if n.startswith("fig")]
    if figs:
        out["figures"] = (
            _minutes(table[figs].sum())
            + " ("
            + ", ".join(f"{n}: {_minutes(table[n])}" for n in sorted(figs))
            + ")"
        )
    return out


def _ratio_lines(frame, group, method_col, seconds_col, base, peers_):
    stats = frame.groupby([group, method_col])[seconds_col].mean().unstack(method_col)
    lines = [f"| {group} | {base} [s] | " + " | ".join(f"{p} [s] (ratio)" for p in peers_) + " |"]
    lines.append("|" + "---|" * (len(peers_) + 2))
    for key, row in stats.iterrows():
        cells = []
        for p in peers_:
            value = row.get(p, np.nan)
            cells.append("—" if pd.isna(value) else f"{value:.3g} ({value / row[base]:.0f}×)")
        lines.append(f"| {key} | {row[base]:.3g} | " + " | ".join(cells) + " |")
    return lines


def figures_section(results):
    out = ["## Figures", ""]
    fig1 = results / "fig1.csv"
    out += [
        "### Figure 1: Fair PCA vs Fair PCA-S (l = 5), two Gaussians in R^10, k = 2",
        "",
        "![Figure 1](results/fig1_mixture.png)",
        "",
    ]
    if fig1.exists():
        f = pd.read_csv(fig1)
        out += [
            "Frobenius gap between the projected group covariances: "
            + ", ".join(f"{m}: {g:.2f}" for m, g in zip(f.method, f.covariance_gap, strict=True))
            + ". As in the paper, only the higher-order variant hides the groups.",
            "",
        ]
    fig2 = results / "fig2.csv"
    out += [
        "### Figures 2 and 3: Lee et al.'s synthetic data (our generator), k = 5, d = 20 to 1000",
        "",
        "![Figure 2](results/fig2_synthetic_metrics.png)",
        "",
        "![Figure 3](results/fig3_runtime_vs_d.png)",
        "",
    ]
    if fig2.exists():
        f = pd.read_csv(fig2)
        summary = f.groupby(["method"])[["var", "mmd2", "linear_inseparability"]].mean()
        out += ["Averages over all d (test split, ten splits per d):", ""]
        out += ["| method | %Var | MMD² | linear inseparability |", "|---|---|---|---|"]
        for name, r in summary.iterrows():
            var = "n/a" if pd.isna(r["var"]) else f"{r['var']:.1f}"
            mmd = "n/a" if pd.isna(r["mmd2"]) else f"{r['mmd2']:.4f}"
            out.append(f"| {name} | {var} | {mmd} | {r['linear_inseparability']:.3f} |")
        out += [
            "",
            "INLP is run for d <= 200 only (d - k classifier fits per split make it the slowest "
            "method; the paper reports ~1270 s at d = 800).",
            "",
        ]
    fig3 = results / "fig3.csv"
    if fig3.exists():
        f = pd.read_csv(fig3)
        peers_ = [p for p in ("INLP", "LEACE", "CorrelationRemover", "Fair Kernel PCA", "PCA")
                  if p in set(f.method)]  # fmt: skip
        out += ["Figure 3: mean fit time per split in CPU seconds (three splits per d), and "
                "ratio to Fair PCA:", ""]  # fmt: skip
        out += _ratio_lines(f, "d", "method", "fit_seconds", "Fair PCA", peers_)
        out.append("")
    fig7 = results / "fig7.csv"
    out += [
        "### Figure 7: runtime vs k at d = 100",
        "",
        "![Figure 7](results/fig7_runtime_vs_k.png)",
        "",
    ]
    if fig7.exists():
        f = pd.read_csv(fig7)
        peers_ = [p for p in ("INLP", "LEACE", "CorrelationRemover", "Fair Kernel PCA")
                  if p in set(f.method)]  # fmt: skip
        out += _ratio_lines(f, "k", "method", "fit_seconds", "Fair PCA", peers_)
        out += [
            "",
            "The Fair Kernel PCA rows of Figures 2, 3 and 7 were regenerated on their own "
            '(`--methods "Fair Kernel PCA"`) after its default exact route changed, so its '
            "time ratios above compare two runs on the same shared machine.",
            "",
        ]
    fig4 = results / "fig4.csv"
    out += [
        "### Figure 4 / App. C.7: accuracy vs fairness trade-off against the reductions approach",
        "",
        "![Figure 4](results/fig4_tradeoff.png)",
        "",
    ]
    if fig4.exists():
        f = pd.read_csv(fig4)
        draws = f.groupby("classifier")["draw"].nunique().to_dict()
        out += [
            f"Random draws of 5,000 train / 5,000 test rows: {draws} (the paper uses ten; "
            "fewer here for the 2-core budget). Fair PCA uses "
            "k = d - 1 and lambda = (i/10)^3, i = 0..10; Fair PCA-S (0.5) k = d/4, Fair PCA-S "
            "(0.85) k = d/2 (App. C.1); ExponentiatedGradient uses difference_bound in "
            "{0.001, ..., 0.2} with logistic regression (C = 1/(2 n 0.01)). Kernel SVM panels "
            "(C = 1/(2 n 0.00005)) use the first 2,000 training rows, every other lambda and "
            "difference_bound in {0.005, 0.02, 0.2} (the SVC inside the reductions loop is the "
            "slowest part). Mean CPU seconds per curve point (fit incl. classifier). Figure 9 "
            "below compares runtimes against the training size.",
            "",
        ]
        f["panel"] = f["dataset"] + " " + f["classifier"] + " " + f["constraint"]
        out += _ratio_lines(f, "panel", "method", "seconds", "Fair PCA", ["ExponentiatedGradient"])
        out.append("")
    fig9 = results / "fig9.csv"
    out += [
        "### Appendix C.7 (Figure 9): runtime vs training size (Adult, DP, logistic regression)",
        "",
        "![Figure 9](results/fig9_runtime_vs_n.png)",
        "",
    ]
    if fig9.exists():
        f = pd.read_csv(fig9)
        out += _ratio_lines(
            f, "n_train", "method", "seconds", "Fair PCA", ["ExponentiatedGradient"]
        )
        out += [
            "",
            "CPU seconds; Fair PCA and Fair PCA-S include the logistic regression fitted on top "
            "(as in the authors' script); ExponentiatedGradient is timed for difference_bound = "
            "0.01. The paper reports <= 0.5 s for our methods (here 0.52 s CPU for Fair PCA at "
            "40,000 rows) and > 32 s for the reductions approach at 40,000 rows (here 3.6 s CPU "
            "per bound with scikit-learn 1.9 / fairlearn 0.15).",
            "",
        ]
    return out


FINDINGS = """## Summary: reproduced vs published (run committed here)

* **Deterministic cells match exactly.** %Var and MMD² of PCA, Fair PCA, Fair PCA-S (0.5) and
  Fair PCA-S (0.85) equal the paper at its printed precision, mean and population std, in all
  48 cells (3 datasets x k in {2, 10} x 4 methods x 2 metrics). This needs the protocol spelled
  out in `protocol.py` (V from the train split, %Var with the test covariance, the biased MMD²
  on the test split with sigma from the train split's top-k PCA projection) and, for Fair
  PCA-S, per-group covariances with ddof = 1 (`numpy.cov`): with ddof = 0, German k = 2
  Fair PCA-S (0.5) gives %Var 4.74 (0.42) instead of the published 4.73 (0.43).
* **Downstream cells under the paper's protocol also match.** With the classifiers of Lee et
  al.'s MATLAB evaluation (`fitcsvm`: RBF kernel with KernelScale 1, i.e. gamma = 1, box
  constraint 1; linear kernel, box constraint 1), fitted *and* scored on the projected test
  split, 83 of the 96 RBF / linear SVM cells of PCA, Fair PCA and Fair PCA-S are identical to
  the paper at its printed precision and the other 13 are within its std; across all columns,
  no PCA or Fair PCA-S cell and one Fair PCA cell differ by more than the paper's std. MLP
  cells differ slightly (the MLP depends on the signs/rotation of the basis, on the
  scikit-learn version, and even on changes of the representation at the 1e-12 level):
  flagged only on COMPAS k = 2 (Fair PCA 57.49 vs 60.65 %Acc).
* **That protocol overstates accuracy.** Fitting and scoring on the same (test) rows lets the
  gamma = 1 RBF SVM memorise them: German k = 10 gives 99.93 % for PCA and Fair PCA, but
  69.7 % / 69.9 % when fitted on train and scored on test (the majority rate is 69.8 %). The
  *proper protocol* tables next to each comparison report the latter for every method.
* **INLP differs, and the published INLP numbers look like an arbitrary basis.** Our INLP
  (implemented from Ravfogel et al. 2020: d - k linear SVMs, exactly k directions left) keeps
  more variance than the published INLP rows (Adult k = 2: 3.01 vs 2.09 %Var; German k = 10:
  26.1 vs 15.5). The published values sit close to k/d (2/97 = 2.06 vs 2.09; 10/97 = 10.3 vs
  10.79; 10/11 = 90.9 vs 91.09), the %Var of an arbitrary k-dim basis of standardized data,
  which is what taking the top-k eigenvectors of INLP's projection matrix gives when INLP stops
  before d - k iterations (eigenvalue 1 is then repeated and the eigensolver picks any basis of
  that eigenspace). We keep the principled variant; the difference is in the peer's
  configuration, not in fair PCA.
* **Fair kernel PCA** (exact Algorithm 3, Gaussian kernel with gamma = 1 / (d Var)) agrees
  within the paper's std in all 36 downstream cells (13 equal at its printed precision); %Var
  and MMD² are n/a as in the paper.
* **Peers on the same rows.** LEACE + PCA and CorrelationRemover + PCA keep slightly more
  variance than Fair PCA (Adult k = 2: 6.76 / 6.85 vs 6.37 %Var) but leave more group
  information (MMD² 0.012 / 0.016 vs 0.009) and are oblique maps; CorrelationRemover also
  needs the sensitive attribute at transform time. Orthogonal
  LEACE followed by PCA gives exactly the Fair PCA subspace (cross-check below, ~1e-14; on
  COMPAS k = 10 the data are rank deficient, so the last directions are not unique).
* **Runtime** (CPU seconds, same process, same rows): on the Lee splits a Fair PCA fit takes
  ~3 ms; INLP ~67x, fair kernel PCA ~14x, CorrelationRemover ~1.2x that (LEACE ~1.5x, timed
  in an earlier run). On the
  synthetic data INLP is 534x slower than Fair PCA at d = 200 and LEACE 311x at d = 1000;
  Fair PCA-S takes 0.34 s at d = 800 (paper: < 0.5 s) and 0.54 s at d = 1000. Against the reductions
  approach, Fair PCA plus the classifier is 19x-88x faster per trade-off point on 5,000 rows
  (Figure 4; the paper: 0.04 s vs 4.6 s) and 7x-34x faster from 1,000 to 40,000 rows (Figure 9;
  0.52 s vs 3.6 s per difference bound at 40,000 rows).
* **Not reproduced here:** FPCA and MbF-PCA (MATLAB/MOSEK) and RLACE (the authors' torch code)
  are printed from the paper, marked *(published)*. Figure 4 uses one draw instead of ten and a
  reduced kernel-SVM setting (see below).
"""


def build(results=RESULTS, timings=None):
    timings = {**_timings(results), **(timings or {})}
    text = [
        INTRO.format(
            tables_time=timings.get("tables", "see results/tables.md"),
            figures_time=timings.get("figures", "see below"),
            tests_time=timings.get("tests", "< 60 s"),
        )
    ]
    text.append(FINDINGS)
    tables = results / "tables.md"
    if tables.exists():
        body = tables.read_text(encoding="utf-8").splitlines()
        body[0] = "## " + body[0].lstrip("# ")
        body = [
            ("#" + line) if line.startswith("## ") and i else line for i, line in enumerate(body)
        ]
        text += ["\n".join(body), ""]
    text += figures_section(results)
    return "\n".join(text) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--out", default=str(HERE / "README.md"))
    parser.add_argument("--tables-time", default=None)
    parser.add_argument("--figures-time", default=None)
    parser.add_argument("--tests-time", default=None)
    args = parser.parse_args(argv)
    timings = {
        k: v
        for k, v in {
            "tables": args.tables_time,
            "figures": args.figures_time,
            "tests": args.tests_time,
        }.items()
        if v
    }
    text = build(Path(args.results), timings)
    Path(args.out).write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    main()
