"""The audit report: the verdict first, per-group rates, no Python reprs, every user string
escaped, a trade-off plot that survives undefined values, and a page that never overflows
horizontally in a real browser (headless Chromium) at 1280x800, 900x700 (MLflow's artifact
viewer) and 800x600."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairpca.tasks.report import (
    Bullets,
    Plot,
    Verdict,
    gate_limits,
    group_rates_frame,
    markdown_table,
    plot_tradeoff,
    render_html,
    render_markdown,
    verdict_sections,
)

VIEWPORTS = ((1280, 800), (900, 700), (800, 600))

# Injected into a copy of the page: after layout, the title says how wide the document is
# against the viewport and which elements stick out without a scrolling box around them.
OVERFLOW_PROBE = """<script>
function fairpcaProbe() {
  var root = document.documentElement, width = root.clientWidth, bad = [];
  document.querySelectorAll('body *').forEach(function (el) {
    if (el.getBoundingClientRect().right <= width + 1) return;
    for (var up = el.parentElement; up && up !== document.body; up = up.parentElement) {
      var o = getComputedStyle(up).overflowX;
      if (o === 'auto' || o === 'scroll') return;
    }
    bad.push(el.tagName.toLowerCase() + (el.className ? '.' + el.className : ''));
  });
  document.title = 'PROBE ' + JSON.stringify({scroll: root.scrollWidth, client: width,
                                              bad: bad.slice(0, 10)});
}
window.addEventListener('load', fairpcaProbe);
</script>"""


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium package)")
    return path


def layout(page: Path, width: int, height: int, tmp_path: Path) -> dict:
    """Open a probed copy of ``page`` in headless Chromium at ``width`` x ``height``."""
    probed = tmp_path / f"probed-{width}x{height}.html"
    probed.write_text(page.read_text().replace("</body>", OVERFLOW_PROBE + "</body>"))
    profile = tmp_path / f"profile-{width}"
    command = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", f"--user-data-dir={profile}", "--hide-scrollbars",
        f"--window-size={width},{height}", "--virtual-time-budget=5000", "--dump-dom",
        probed.as_uri(),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    found = re.search(r"<title>PROBE (.*?)</title>", done.stdout, re.S)
    assert found, f"no probe result; chromium said: {done.stderr[-2000:]}"
    return json.loads(found.group(1).replace("&quot;", '"'))


def assert_fits(page: Path, tmp_path: Path) -> None:
    for width, height in VIEWPORTS:
        seen = layout(page, width, height, tmp_path)
        assert seen["bad"] == [], (width, seen)
        assert seen["scroll"] <= seen["client"], (width, seen)


SELECTION = {
    "chosen": {"name": "fair_pca/logreg@lambda=0.125"},
    "gate": "upper_bound",
    "decision": {"promote": False, "reasons": ["dp_difference bound 0.07 > 0.05"]},
    "test": {
        "accuracy": 0.81, "accuracy.ci95_low": 0.79, "accuracy.ci95_high": 0.83,
        "dp_difference": 0.03, "dp_difference.ci95_low": 0.01, "dp_difference.ci95_high": 0.05,
        "eo_difference": float("nan"),
        "selection_rate.sex:Female": 0.1, "tpr.sex:Female": 0.5, "fpr.sex:Female": 0.05,
        "base_rate.sex:Female": 0.12, "selection_rate.sex:Male": 0.13, "tpr.sex:Male": 0.55,
        "selection_rate.sex:Female/race:White": 0.11,
    },
    "baselines": {
        "majority": {"class": 0, "test": {"accuracy": 0.76}},
        "pca": {"name": "pca/logreg", "test": {"accuracy": 0.84, "dp_difference": 0.2}},
    },
    "group_sizes": {"sex": {"Female": 3300, "Male": 6700}},
    "warnings": [],
}  # fmt: skip

REFERENCES = [
    {
        "name": "threshold optimizer",
        "approach": "post-processing",
        "needs_sensitive_at_prediction": True,
        "validation": {"accuracy": 0.8, "dp_difference": 0.02},
        "test": {"accuracy": 0.8, "accuracy.ci95_low": 0.78, "accuracy.ci95_high": 0.82},
    }
]


def test_verdict_comes_first_with_test_metrics_beside_baselines_and_references():
    sections = verdict_sections(
        SELECTION, thresholds={"max_dp_difference": 0.05, "min_accuracy": 0.0},
        references=REFERENCES,
    )  # fmt: skip
    heading, blocks = sections[0]
    assert heading.startswith("Verdict")
    assert blocks[0] == Verdict("Do not promote: fair_pca/logreg@lambda=0.125", False)
    assert "Gate: upper 95% bound of dp_difference ≤ 0.05, lower 95% bound of accuracy ≥ 0." in (
        blocks[1].items
    )
    table = blocks[2]
    assert list(table["model"]) == [
        "fair_pca/logreg@lambda=0.125", "pca/logreg", "majority class (0)", "threshold optimizer",
    ]  # fmt: skip
    assert table.loc[0, "accuracy"] == "0.8100 [0.7900, 0.8300]"
    assert table.loc[0, "eo_difference"] == "-"  # undefined: a dash, not nan
    assert table.loc[3, "role"] == (
        "reference: post-processing, needs the sensitive attribute at prediction"
    )
    assert sections[1][0].startswith("Per-group rates")


def test_group_rates_read_every_rate_and_the_sizes():
    frame = group_rates_frame(SELECTION["test"], SELECTION["group_sizes"])
    female = frame.set_index(["attribute", "group"]).loc[("sex", "Female")]
    assert female.to_dict() == {"rows (all parts)": 3300, "selection rate": 0.1, "TPR": 0.5,
                                "FPR": 0.05, "base rate": 0.12}  # fmt: skip
    assert ("intersection", "sex:Female/race:White") in set(
        zip(frame["attribute"], frame["group"], strict=True)
    )
    assert np.isnan(frame.set_index("group").loc["Male", "FPR"])


def test_gate_limits_read_max_and_min_names():
    assert gate_limits({"max_dp_difference": 0.05, "max_eo_difference": 0.1,
                        "min_accuracy": 0.7}) == (
        {"dp_difference": 0.05, "eo_difference": 0.1}, {"accuracy": 0.7})  # fmt: skip


PAYLOAD = "<img src=x onerror=alert(1)>[x](javascript:alert(1))`"


def test_every_user_string_is_escaped_in_html_and_markdown():
    frame = pd.DataFrame({PAYLOAD: [PAYLOAD], "n": [1.5]})
    sections = [
        (PAYLOAD, [Verdict(PAYLOAD, True), Bullets([PAYLOAD])]),
        ("table", frame),
        ("plot", Plot(PAYLOAD)),
        ("text", PAYLOAD),
    ]
    page = render_html(PAYLOAD, sections, None)
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    markdown = render_markdown(PAYLOAD, sections, "tradeoff.png")
    assert "<img" not in markdown and "](javascript" not in markdown
    assert "\\[x\\]\\(javascript:alert\\(1\\)\\)\\`" in markdown


def test_page_has_one_stylesheet_scroll_boxes_and_no_python_reprs():
    page = render_html("T", verdict_sections(SELECTION, thresholds={"max_dp_difference": 0.05}),
                       None)  # fmt: skip
    assert page.count("<style>") == 1 and "overflow-x:auto" in page
    assert page.count("<table>") == page.count("<div class='scroll'><table>") == 2
    assert "nan" not in page.lower().replace("nan-", "")
    for repr_like in ("['", "{'", "': ", "None"):
        assert repr_like not in page


def test_trade_off_plot_survives_undefined_values_and_fits_800_px(tmp_path):
    from PIL import Image

    rows = []
    for variant in ("pca", "fair_pca"):
        for i, lam in enumerate([0.0, 0.5, 1.0]):
            rows.append({"variant": variant, "classifier": "logreg", "lambda": lam,
                         "lambda_index": i, "accuracy": 0.8 + 0.01 * i,
                         "accuracy.ci95_low": 0.78, "accuracy.ci95_high": 0.84,
                         "dp_difference": [0.02, float("nan"), 0.1][i],
                         "dp_difference.ci95_low": float("nan"),
                         "dp_difference.ci95_high": 0.12,
                         "eo_difference": float("nan")})  # fmt: skip
    table = pd.DataFrame(rows)
    path = plot_tradeoff(
        table, tmp_path / "tradeoff.png", chosen=rows[3], pca=rows[0],
        majority_accuracy=float("nan"),
        thresholds={"max_dp_difference": 0.05, "max_eo_difference": 0.1, "min_accuracy": 0.7},
        references=[{"name": "ref", "validation": {"accuracy": 0.8, "dp_difference": 0.01}}],
    )  # fmt: skip
    width, height = Image.open(path).size
    assert width <= 800 and height > width / 2  # two panels, stacked


def test_a_page_with_a_wide_table_and_long_words_does_not_overflow(tmp_path):
    wide = pd.DataFrame({f"column with a long name {i}": ["x" * 30] for i in range(12)})
    sections = [
        ("Verdict", [Verdict("Promote: " + "a" * 200, True), Bullets(["b/" * 150])]),
        ("Candidates", wide),
    ]
    page = tmp_path / "report.html"
    page.write_text(render_html("Fairness audit " + "c" * 120, sections, None))
    assert_fits(page, tmp_path)


def test_the_probe_finds_an_overflowing_page(tmp_path):
    """The browser check can fail: a fixed-width element outside a scrolling box is found."""
    page = tmp_path / "bad.html"
    page.write_text("<!doctype html><html><body><div style='width:1500px'>x</div></body></html>")
    seen = layout(page, 1280, 800, tmp_path)
    assert seen["bad"] == ["div"] and seen["scroll"] > seen["client"]


def _audit_report(store_uri: str, out: Path, **overrides) -> Path:
    """report.html of a real audit: default variants, classifiers and gate; fewer rows and
    lambdas (the page's width depends on names and columns, not on row counts)."""
    from fairpca.flows.audit import fairness_audit
    from fairpca.flows.config import AuditConfig

    config = AuditConfig(
        dataset="adult", lambdas=[0.0, 0.125, 1.0], n_train=1500, n_validation=1000,
        n_test=1000, metric_max_rows=300, n_bootstrap=200, tracking_uri=store_uri,
        output_dir=out, model_name=f"fairpca-report-{out.parent.name}", **overrides,
    )  # fmt: skip
    return Path(fairness_audit(config).report_path)


@pytest.mark.flow
@pytest.mark.slow
@pytest.mark.parametrize("sensitive", [[], ["sex", "race"]], ids=["default", "two-attributes"])
def test_audit_report_fits_every_viewport_in_chromium(
    prefect_harness, mlflow_store, tmp_path, sensitive
):
    chromium()
    page = _audit_report(mlflow_store[0], tmp_path / "out", sensitive=sensitive)
    text = page.read_text()
    assert text.index("Verdict") < text.index("Per-group rates") < text.index("Trade-off")
    for repr_like in ("['", "{'", "None"):
        assert repr_like not in text
    assert "RBF SVC training rows: 1500" in text  # min(svc_max_train_rows 2000, n_train 1500)
    assert_fits(page, tmp_path)


def test_verdict_states_the_gate_in_the_policys_own_words():
    policy = {
        "name": "demographic_parity+four_fifths",
        "description": "demographic_parity+four_fifths: DP difference <= 0.05; selection-rate "
        "ratio >= 0.8 (point estimate, as the rule is defined)",
        "thresholds": {"max_dp_difference": 0.05, "min_selection_rate_ratio": 0.8},
    }
    sections = verdict_sections(SELECTION, thresholds={}, policy=policy)
    items = sections[0][1][1].items
    assert f"Gate: policy {policy['description']}." in items
    assert not any("lower 95% bound of selection_rate_ratio" in item for item in items)


def test_markdown_table():
    frame = pd.DataFrame({"a": [1.23456, np.nan], "b": ["x", "y"]})
    assert markdown_table(frame).splitlines() == ["| a | b |", "|---|---|", "| 1.235 | x |",
                                                  "| - | y |"]  # fmt: skip


def test_report_renders_structured_sections_as_markdown_and_html():
    from fairpca.tasks.report import Bullets, Plot, Strong, render_html, render_markdown

    sections = [
        ("Decision", [Strong("do NOT promote"), Bullets(["DP 0.06 > max 0.05", "a < b"])]),
        ("Table", pd.DataFrame({"x": [1.0]})),
        ("Plot", Plot("trade-off")),
        ("Notes", "plain text"),
    ]
    markdown = render_markdown("T", sections, "tradeoff.png")
    assert "**do NOT promote**" in markdown and "- DP 0\\.06 &gt; max 0\\.05" in markdown
    assert "![trade\\-off](tradeoff.png)" in markdown  # user text escaped (markdown_text)
    page = render_html("T", sections, None)
    assert "<p><strong>do NOT promote</strong></p>" in page
    assert "<li>a &lt; b</li>" in page and "**" not in page and "- DP" not in page


def test_trade_off_plot_draws_dollar_names_as_written(
    tmp_path, saved_figures, dollar_labels, drawn_literally
):
    money, band = dollar_labels
    rows = [
        {
            "variant": "fair_pca",
            "classifier": band,
            "lambda": lam,
            "lambda_index": i,
            "accuracy": 0.8,
            "dp_difference": 0.02 * i,
        }
        for i, lam in enumerate([0.0, 1.0])
    ]
    path = plot_tradeoff(
        pd.DataFrame(rows), tmp_path / "tradeoff.png", chosen=rows[1], pca=None,
        majority_accuracy=0.7, thresholds={"max_dp_difference": 0.05},
        references=[{"name": money, "validation": {"accuracy": 0.8, "dp_difference": 0.01}}],
    )  # fmt: skip
    assert path.stat().st_size > 0
    assert drawn_literally(saved_figures[-1], [f"classifier {band}", money])
