"""The audit report: the verdict first (decision and why, the chosen model, every model's test
numbers with intervals, the groups by name), no Python reprs, every user string escaped, a
trade-off plot that survives undefined values, and a page measured in a real browser
(headless Chromium): the verdict fits the first screen at 1280x900 with no verdict table
scrolling sideways, reflows into cards at 390 px, and no page overflows horizontally at
1280x800, 900x700 (MLflow's artifact viewer), 800x600 or 390x844."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from records import replaced

from fairpca.tasks.decision import Kind, Reason, render
from fairpca.tasks.record import Policy, PromotionRecord, ReferenceMitigation
from fairpca.tasks.report import (
    COMPLEMENTARY,
    REPORT_TEMPLATE,
    TEMPLATES,
    Bullets,
    Estimate,
    Plot,
    Verdict,
    build_verdict,
    frontier_sections,
    gate_limits,
    group_rows,
    plot_tradeoff,
    render_html,
    render_markdown,
    report_sections,
    report_title,
)

VIEWPORTS = ((1280, 800), (900, 700), (800, 600), (390, 844))
PROMOTED = PromotionRecord(promote=True, reasons=["no current champion: the gate alone decides"])

# Injected into a copy of the page: after layout, it posts to the frame's host how wide the
# document is against the viewport, which elements stick out without a scrolling box around
# them, and where the verdict is: its bottom edge, and per verdict table its right edge
# against the verdict's, whether an ancestor scrolls it and how its rows are displayed.
PROBE = """<script>
function fairpcaProbe() {
  var root = document.documentElement, width = root.clientWidth, bad = [];
  function scrolls(el) {
    for (var up = el.parentElement; up && up !== document.body; up = up.parentElement) {
      var o = getComputedStyle(up).overflowX;
      if (o === 'auto' || o === 'scroll') return true;
    }
    return false;
  }
  document.querySelectorAll('body *').forEach(function (el) {
    if (el.getBoundingClientRect().right > width + 1 && !scrolls(el)) {
      bad.push(el.tagName.toLowerCase() + (el.className ? '.' + el.className : ''));
    }
  });
  var verdict = document.getElementById('verdict'), tables = [], bottom = null;
  if (verdict) {
    var edge = verdict.getBoundingClientRect().right;
    bottom = Math.ceil(verdict.getBoundingClientRect().bottom);
    verdict.querySelectorAll('table.verdict-table').forEach(function (t) {
      tables.push({id: t.id, right: Math.ceil(t.getBoundingClientRect().right),
                   edge: Math.ceil(edge), scrolled: scrolls(t),
                   rows: getComputedStyle(t.querySelector('tbody tr')).display});
    });
  }
  parent.postMessage(JSON.stringify({scroll: root.scrollWidth, client: width,
    height: window.innerHeight, bad: bad.slice(0, 10), bottom: bottom, tables: tables}), '*');
}
window.addEventListener('load', fairpcaProbe);
</script>"""

# A frame of exactly width x height: Chromium's windows have a minimum width (500 px) and
# their own toolbars, a frame's viewport is what it is told.
HOST = """<!doctype html><html><head><title>waiting</title></head>
<body style="margin:0"><iframe src="{src}" style="border:0;width:{w}px;height:{h}px"></iframe>
<script>window.addEventListener('message', function (e) {{ document.title = 'PROBE ' + e.data; }});
</script></body></html>"""


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's chromium package)")
    return path


def layout(page: Path, width: int, height: int, tmp_path: Path) -> dict:
    """Open a probed copy of ``page`` in headless Chromium with a viewport of exactly
    ``width`` x ``height`` (a frame of that size) and return what the probe measured."""
    probed = tmp_path / f"probed-{width}x{height}.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    host = tmp_path / f"host-{width}x{height}.html"
    host.write_text(HOST.format(src=probed.name, w=width, h=height))
    command = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", f"--user-data-dir={tmp_path / f'profile-{width}'}", "--hide-scrollbars",
        f"--window-size={width + 40},{height + 200}", "--virtual-time-budget=5000", "--dump-dom",
        host.as_uri(),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    found = re.search(r"<title>PROBE (.*?)</title>", done.stdout, re.S)
    assert found, f"no probe result; chromium said: {done.stderr[-2000:]}"
    seen = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert (seen["client"], seen["height"]) == (width, height), seen  # the viewport asked for
    return seen


def assert_fits(page: Path, tmp_path: Path) -> None:
    for width, height in VIEWPORTS:
        seen = layout(page, width, height, tmp_path)
        assert seen["bad"] == [], (width, seen)
        assert seen["scroll"] <= seen["client"], (width, seen)


def assert_verdict_first(page: Path, tmp_path: Path) -> None:
    """At 1280x900 the verdict ends above the fold and no verdict table is wider than the
    verdict or sits in a scrolling box; at 390x844 its tables are cards (one block per row)
    and nothing sticks out."""
    wide = layout(page, 1280, 900, tmp_path)
    assert wide["bottom"] is not None and wide["bottom"] <= 900, wide
    assert len(wide["tables"]) >= 1, wide
    for table in wide["tables"]:
        assert table["right"] <= table["edge"] and not table["scrolled"], (table, wide)
        assert table["rows"] == "table-row", table
    assert wide["scroll"] <= wide["client"] and wide["bad"] == [], wide
    phone = layout(page, 390, 844, tmp_path)
    for table in phone["tables"]:
        assert table["right"] <= table["edge"] and not table["scrolled"], (table, phone)
        assert table["rows"] == "block", table  # a card per model, per group
    assert phone["scroll"] <= phone["client"] and phone["bad"] == [], phone


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

POLICY = Policy(
    name="demographic_parity+four_fifths",
    thresholds={"max_dp_difference": 0.05, "min_selection_rate_ratio": 0.8, "min_accuracy": 0.0},
    description="demographic_parity+four_fifths: DP difference <= 0.05; selection-rate ratio "
    ">= 0.8 (point estimate, as the rule is defined)",
)
REFERENCE_NAMES = ("threshold_optimizer", "exponentiated_gradient", "correlation_remover")


def _reviewed(record, *, groups: dict[str, str] | None = None):
    """``record`` as a default audit leaves it: a gate policy, the three reference
    mitigations, balanced accuracy and the selection-rate ratio, rates per named group."""
    groups = groups or {"sex": "Female", "race": "White"}
    rates = {}
    for attribute, group in groups.items():
        for other in (group, "Other"):
            rates |= {
                f"{rate}.{attribute}:{other}": 0.1 + 0.01 * i
                for i, rate in enumerate(("selection_rate", "tpr", "fpr", "base_rate"))
            }
    rates |= {"selection_rate.race:White/sex:Female": 0.12, "tpr.race:White/sex:Female": 0.4}
    estimates = {
        f"{name}{end}": value + shift
        for name, value in (("balanced_accuracy", 0.652), ("selection_rate_ratio", 0.982))
        for end, shift in (("", 0.0), (".ci95_low", -0.02), (".ci95_high", 0.01))
    }
    references = [
        ReferenceMitigation(
            name=name, approach=approach, needs_sensitive_at_prediction=needs,
            validation={"accuracy": 0.8}, test={**record.selection.test, **estimates},
        )
        for name, approach, needs in zip(
            REFERENCE_NAMES, ("post-processing", "reductions", "pre-processing"),
            (True, False, True), strict=True,
        )
    ]  # fmt: skip
    record = replaced(record, "selection", test={**record.selection.test, **estimates, **rates})
    return replaced(record, policy=POLICY, references=references)


def test_verdict_comes_first_with_every_model_and_the_groups_by_name(audit_record):
    record = _reviewed(audit_record)
    sections = report_sections(record, PROMOTED)
    heading, verdict = sections[0]
    assert heading.startswith("Verdict") and isinstance(verdict, Verdict)
    assert (verdict.promote, verdict.headline) == (True, "Promoted to champion")
    assert verdict.why == (
        "Meets the gate demographic_parity+four_fifths (upper 95% bounds) on the validation "
        "rows; no current champion: the gate alone decides"
    )
    assert verdict.chosen == "fair_pca/logreg@lambda=0.125"
    assert verdict.columns == (
        "accuracy", "balanced_accuracy", "dp_difference", "selection_rate_ratio",
        "eo_difference", "dp_difference.intersection",
    )  # fmt: skip
    assert [(row.model, row.role) for row in verdict.rows] == [
        ("fair_pca/logreg@lambda=0.125", "chosen"),
        ("pca/logreg@lambda=0", "baseline: unconstrained PCA"),
        ("majority class (0)", "baseline"),
        ("threshold_optimizer", "reference: post-processing, needs the sensitive attribute at "
         "decision time; the deployment excludes it"),
        ("exponentiated_gradient", "reference: reductions"),
        ("correlation_remover", "reference: pre-processing, needs the sensitive attribute at "
         "decision time; the deployment excludes it"),
    ]  # fmt: skip
    chosen = verdict.rows[0].estimates
    assert str(chosen["accuracy"]) == "0.822 (0.811–0.832)"  # 0.8215 ± 0.01
    assert str(chosen["selection_rate_ratio"]) == "0.982 (0.962–0.992)"
    assert str(verdict.rows[2].estimates["eo_difference"]) == "-"  # not measured: a dash
    assert [(g.attribute, g.group) for g in verdict.groups] == [
        ("sex", "Female"),
        ("sex", "Other"),
        ("race", "White"),
        ("race", "Other"),
        ("sex", "Male"),
        ("race", "Black"),
        ("race", "Eskimo"),
    ]  # single attributes by name; the intersection has a section of its own
    # every group is accounted for: one without published test rates says so on its row
    # (sizes over all parts: Male 3350, Black 480, Eskimo 12; a quarter are test rows)
    assert [g.rows for g in verdict.groups[4:]] == [
        COMPLEMENTARY, COMPLEMENTARY, "withheld: fewer than 30 test rows"
    ]  # fmt: skip
    assert verdict.groups[0].rows == 1650 and verdict.groups[0].rates["tpr"] == pytest.approx(0.11)
    headings = [h for h, _ in sections]
    assert headings[1:4] == [
        "Why", "Warnings", "Intersection groups of the chosen model (test rows)",
    ]  # fmt: skip
    assert headings.index("Trade-off on the validation rows (2,500)") == 4


def _decision(record, promotion=None) -> tuple[bool, str, str]:
    verdict = build_verdict(record, promotion)
    return verdict.promote, verdict.headline, verdict.why


def test_the_decision_and_why_in_one_sentence_for_each_outcome(audit_record):
    gate = "the gate thresholds (upper 95% bounds) on the validation rows"
    assert _decision(audit_record) == (
        False, "Passes the gate",
        f"Meets {gate}; the promotion is decided when the audit is logged to MLflow",
    )  # fmt: skip
    assert _decision(audit_record, PROMOTED)[:2] == (True, "Promoted to champion")
    kept = PromotionRecord(promote=False, reasons=["champion v3: the challenger is worse"])
    verdict = build_verdict(audit_record, kept)
    assert (verdict.promote, verdict.headline, verdict.deciding) == (
        False, "Not promoted", "the champion stays",
    )  # fmt: skip
    assert verdict.decision_reasons[-1].kind == Kind.CHAMPION_STAYS
    unregistered = replaced(audit_record, register_model=False)
    assert build_verdict(unregistered, kept).deciding == "not registered"
    gate_failed = Reason(kind=Kind.FAILS_GATE, decides=True, subject="fair_pca/logreg@lambda=0")
    failed = replaced(audit_record, "selection.decision", promote=False, reasons=[gate_failed])
    verdict = build_verdict(failed, kept)
    assert (verdict.promote, verdict.headline, verdict.deciding) == (
        False, "Not promoted", "fails the gate",
    )  # fmt: skip
    assert verdict.why == render(gate_failed)[:1].upper() + render(gate_failed)[1:]


def test_a_promotion_despite_a_dominating_reference_says_so_first(audit_record):
    """--promote-dominated: the headline is the promotion, its reason starts with what it
    overrode."""
    dominated = Reason(kind=Kind.DOMINATED, decides=True, subject="exponentiated_gradient",
                       measure="balanced_accuracy", rows="validation", flags=("overridden",),
                       numbers={"margin": 0.02, "margin_low": 0.01,
                                "margin_high": 0.03})  # fmt: skip
    chosen = audit_record.selection.decision.reasons[0]
    anyway = replaced(audit_record, "selection.decision", promote=True,
                      reasons=[dominated, chosen])  # fmt: skip
    verdict = build_verdict(anyway, PROMOTED)
    assert (verdict.promote, verdict.headline) == (True, "Promoted to champion")
    assert verdict.decision_reasons[0] == dominated
    assert verdict.why.lower().startswith(render(dominated).lower())


def test_an_estimate_reads_its_interval_and_never_shows_nan():
    metrics = {"a": 0.78159, "a.ci95_low": 0.7649, "a.ci95_high": 0.7977, "b": float("nan"),
               "c": 0.5, "c.ci95_low": float("nan"), "c.ci95_high": 0.6}  # fmt: skip
    assert str(Estimate.of(metrics, "a")) == "0.782 (0.765–0.798)"
    assert str(Estimate.of(metrics, "b")) == str(Estimate.of(metrics, "missing")) == "-"
    assert str(Estimate.of(metrics, "c")) == "0.500"  # half an interval is no interval
    assert str(Estimate(float("nan"), 0.1, 0.2)) == str(Estimate(None)) == "-"


def test_group_rates_read_every_rate_and_the_sizes():
    selection = SimpleNamespace(test_group_sizes=None, **SELECTION)
    groups = {(g.attribute, g.group): g for g in group_rows(selection, min_group_size=30)}
    female = groups[("sex", "Female")]
    assert (female.rows, female.rates) == (
        3300,
        {"selection_rate": 0.1, "tpr": 0.5, "fpr": 0.05, "base_rate": 0.12},
    )
    assert np.isnan(groups[("sex", "Male")].rates["fpr"])
    (cell,) = group_rows(selection, attributes=False)
    assert (cell.attribute, cell.group) == ("intersection", "sex:Female/race:White")


def _measured_groups(labels: dict[str, int], seed: int = 0) -> SimpleNamespace:
    """A selection measured as the audit measures it: test rates of groups of these sizes
    (the metric names hold tokens of the labels), sizes over all parts (the test part is a
    fifth of them) and on the test rows."""
    from fairpca.metrics import published_group_sizes
    from fairpca.tasks.evaluate import metrics_with_intervals

    rng = np.random.default_rng(seed)
    groups = pd.DataFrame({"race": np.repeat(list(labels), list(labels.values()))})
    y, y_pred = rng.integers(0, 2, len(groups)), rng.integers(0, 2, len(groups))
    test = metrics_with_intervals(y, y_pred, groups, min_group_size=30, n_resamples=20, seed=0)
    sizes = {
        name: dict(sizes)
        for name, sizes in published_group_sizes(groups, min_group_size=30)[0].items()
    }
    everywhere = {"race": {g: 5 * n for g, n in labels.items()}}  # every group has 30 rows there
    split = SimpleNamespace(n_train=3 * len(groups), n_validation=len(groups), n_test=len(groups))
    return SimpleNamespace(test=test, test_group_sizes=sizes, group_sizes=everywhere, split=split)


def test_group_rows_show_the_labels_that_metric_names_spell_otherwise():
    """Labels with characters MLflow's metric names do not take ("/", "(", "ä") keep their
    rates and sizes: none is reported as withheld."""
    labels = {"White, non-Hispanic": 300, "Black (non-Hispanic)": 160, "Hispanic/Latino": 170,
              "männlich": 120}  # fmt: skip
    rows = group_rows(_measured_groups(labels), min_group_size=30)
    assert {g.group: g.rows for g in rows} == labels
    assert all(np.isfinite(g.rates["selection_rate"]) for g in rows)


def test_a_large_group_withheld_to_hide_a_small_one_says_so():
    """Complementary suppression: a group of 12 test rows is withheld, and so is the next
    smallest (400 test rows), lest the total give the small one away; only the small one's
    row says it has fewer than 30 test rows."""
    selection = _measured_groups({"married": 2000, "single": 1000, "divorced": 400, "unknown": 12})
    rows = {g.group: g.rows for g in group_rows(selection, min_group_size=30)}
    assert rows["divorced"] == COMPLEMENTARY
    assert rows["unknown"] == "withheld: fewer than 30 test rows" and rows["married"] == 2000


def test_gate_limits_read_max_and_min_names():
    assert gate_limits({"max_dp_difference": 0.05, "max_eo_difference": 0.1,
                        "min_accuracy": 0.7}) == (
        {"dp_difference": 0.05, "eo_difference": 0.1}, {"accuracy": 0.7})  # fmt: skip


PAYLOAD = "<img src=x onerror=alert(1)>[x](javascript:alert(1))`"


def test_every_user_string_is_escaped_in_html_and_markdown(audit_record):
    record = _reviewed(audit_record, groups={"sex": PAYLOAD})
    record = replaced(record, "selection.chosen", name=PAYLOAD)
    frame = pd.DataFrame({PAYLOAD: [PAYLOAD], "n": [1.5]})
    sections = [
        *report_sections(record, PROMOTED)[:2],
        (PAYLOAD, [Bullets([PAYLOAD])]),
        ("table", frame),
        ("plot", Plot(PAYLOAD)),
        ("text", PAYLOAD),
    ]
    page = render_html(PAYLOAD, sections, None)
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count("&lt;img src=x") >= 6  # title, chosen, group, heading, bullet, cell
    markdown = render_markdown(PAYLOAD, sections, "tradeoff.png")
    assert not re.search(r"(?<!\\)<img", markdown)
    assert not re.search(r"(?<!\\)\]\(javascript", markdown)  # no link: its ] is escaped
    assert "&lt;" not in markdown  # Markdown escapes, not HTML entities
    assert "\\[x\\](javascript:alert(1))\\`" in markdown


def test_page_has_one_stylesheet_no_python_reprs_and_its_template_is_packaged(audit_record):
    assert (TEMPLATES / REPORT_TEMPLATE).is_file()
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert '"fairpca.tasks" = ["templates/*.j2"]' in pyproject  # shipped in the wheel
    record = _reviewed(audit_record)
    page = render_html(report_title(record), report_sections(record, PROMOTED), None)
    assert page.lstrip().startswith("<!doctype html>")
    assert page.count("<style>") == 1 and page.count('class="verdict-table"') == 2
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


def test_a_page_with_a_wide_table_and_long_words_does_not_overflow(tmp_path, audit_record):
    wide = pd.DataFrame({f"column with a long name {i}": ["x" * 30] for i in range(12)})
    record = _reviewed(replaced(audit_record, "selection.chosen", name="a" * 200))
    sections = [
        *report_sections(record, PROMOTED)[:1],
        ("Why", Bullets(["b/" * 150])),
        ("Candidates", wide),
    ]
    page = tmp_path / "report.html"
    page.write_text(render_html("Fairness audit " + "c" * 120, sections, None))
    assert_fits(page, tmp_path)


def test_the_verdict_fits_the_first_screen_at_1280_and_becomes_cards_at_390(tmp_path, audit_record):
    """Two attributes (intersection columns), a gate policy, three reference mitigations,
    group labels of 60 characters: the verdict is still on the first screen at 1280x900."""
    chromium()
    record = _reviewed(audit_record, groups={"sex": "Female", "race": "Asian-Pac-Islander " * 3})
    page = tmp_path / "report.html"
    page.write_text(render_html(report_title(record), report_sections(record, PROMOTED), None))
    assert_verdict_first(page, tmp_path)


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


@pytest.mark.e2e
@pytest.mark.flow
@pytest.mark.slow
@pytest.mark.parametrize("sensitive", [[], ["sex", "race"]], ids=["default", "two-attributes"])
def test_audit_report_fits_every_viewport_in_chromium(
    prefect_harness, mlflow_store, tmp_path, sensitive
):
    chromium()
    page = _audit_report(mlflow_store[0], tmp_path / "out", sensitive=sensitive)
    text = page.read_text()
    assert text.index('id="verdict"') < text.index("Why") < text.index("Trade-off")
    assert "sex: Female" in text and "sex: 0" not in text  # groups by name
    for repr_like in ("['", "{'", "None"):
        assert repr_like not in text
    assert_verdict_first(page, tmp_path)
    assert_fits(page, tmp_path)


def test_why_states_the_gate_in_the_policys_own_words(audit_record):
    record = _reviewed(audit_record)
    why = dict(report_sections(record))["Why"]
    assert f"Gate: {POLICY.description}." in why.items
    reasons = record.selection.decision.reasons
    assert [render(r) for r in reasons] == why.items[1:]  # the choice's own reasons follow


def test_the_frontier_has_its_slot_after_the_verdict(audit_record):
    from fairpca.tasks.record import FrontierPoint

    assert frontier_sections(audit_record) == []  # a record without a frontier
    point = {"variant": "fair_pca", "k": 5, "classifier": "logreg", "measure": "accuracy",
             "value": 0.78, "meets_gate": True, "stage": "sweep"}  # fmt: skip
    points = [FrontierPoint(**point, **{"lambda": lam}, pareto=lam > 0) for lam in (0.0, 0.5)]
    record = replaced(audit_record, frontier=points)
    ((heading, frame),) = frontier_sections(record)
    assert heading.startswith("Accuracy–fairness frontier")
    assert list(frame["lambda"]) == [0.5, 0.0]  # Pareto points first
    headings = [h for h, _ in report_sections(record)]
    plot = next(i for i, h in enumerate(headings) if h.startswith("Trade-off"))
    assert headings.index("Why") < headings.index(heading) < plot  # after the verdict's sections


def test_markdown_table():
    frame = pd.DataFrame({"a": [1.23456, np.nan], "b": ["x", "y"]})
    assert render_markdown("T", [("S", frame)], "p.png").splitlines()[4:] == [
        "| a | b |", "|---|---|", "| 1.235 | x |", "| - | y |"]  # fmt: skip


def test_report_renders_structured_sections_as_markdown_and_html(audit_record):
    record = _reviewed(audit_record)
    sections = [
        report_sections(record, PROMOTED)[0],
        ("Decision", [Bullets(["DP 0.06 > max 0.05", "a < b"])]),
        ("Table", pd.DataFrame({"x": [1.0]})),
        ("Plot", Plot("trade-off")),
        ("Notes", "plain text"),
    ]
    markdown = render_markdown("T", sections, "tradeoff.png")
    assert "**Promoted to champion**: Meets the gate" in markdown
    assert "| fair_pca/logreg@lambda=0.125 (chosen) | 0.822 (0.811–0.832) |" in markdown
    assert "| sex: Female | 1650 | 0.100 | 0.110 | 0.120 | 0.130 |" in markdown
    assert "- DP 0.06 \\> max 0.05" in markdown
    assert "![trade-off](tradeoff.png)" in markdown  # user text escaped (markdown_text)
    page = render_html("T", sections, None)
    assert '<p class="headline">Promoted to champion</p>' in page
    assert "<li>a &lt; b</li>" in page and "**" not in page and "- DP" not in page
    assert '<td data-label="ΔDP"><span class="value"><span class="est">' in page


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


def test_where_fair_pca_misses_parity_one_paragraph_says_why_and_what_would(audit_record):
    """The gap is in the spread of the scores (the peer study: logit standard deviations
    1.05-1.43 per cell): the report says so with the numbers, whether Fair PCA-S on the
    intersection closes it, and what the post-processing reference reaches."""
    from fairpca.tasks.report import report_sections

    gap = {
        "scores": {"sex:Female/race:Black": {"mean": -1.0, "sd": 1.05},
                   "sex:Male/race:White": {"mean": -0.9, "sd": 1.43}},
        "fair_pca_s": {"fair_pca_s_intersection": {
            "name": "fair_pca_s_intersection/logreg_tuned@k=55,lambda=0", "meets_gate": False,
            "balanced_accuracy": 0.71, "dp_difference.intersection": 0.12}},
    }  # fmt: skip
    record = replaced(_reviewed(audit_record), parity_gap=gap)
    sections = dict(report_sections(record, PROMOTED))
    text = sections["Why fair PCA does not reach parity here, and what would"]
    assert "ranges from 1.05 (sex:Female/race:Black) to 1.43 (sex:Male/race:White)" in text
    assert "Fair PCA-S on the intersection's cells" in text and "does not close the gap" in text
    assert "balanced accuracy 0.710, ΔDP ∩ 0.120" in text
    assert "With the sensitive attribute at prediction, threshold_optimizer" in text
    assert "Why fair PCA does not reach parity here" not in dict(
        report_sections(_reviewed(audit_record), PROMOTED)
    )  # no gap recorded (the chosen model meets the gate): no paragraph


def test_the_parity_diagnosis_follows_the_numbers_and_says_searched_when_it_was(audit_record):
    """The 255k-row census case: score spreads 0.34 and 0.35, means -0.69 and -0.49; Fair
    PCA-S searched with no eligible candidate. The paragraph blames the means, not the
    spreads, and does not tell the reader to add a variant that was searched."""
    from fairpca.tasks.report import parity_paragraph

    scores = {"sex:Female": {"mean": -0.69, "sd": 0.34}, "sex:Male": {"mean": -0.49, "sd": 0.35}}
    searched = {"scores": scores, "fair_pca_s": {}, "fair_pca_s_searched": ["fair_pca_s"]}
    text = parity_paragraph(replaced(audit_record, parity_gap=searched))
    assert "mean score differs between the groups, from -0.69 to -0.49" in text
    assert "was searched, but none of its candidates is eligible" in text
    assert "add fair_pca_s to --variants" not in text
    unsearched = {"scores": scores, "fair_pca_s": {}}
    assert "add fair_pca_s to --variants" in parity_paragraph(
        replaced(audit_record, parity_gap=unsearched)
    )


def _searched_on_a_sample(record):
    """``record`` after a wide search: its candidates measured on 2,500 sampled validation
    rows, the chosen candidate and the baselines on all 12,211."""
    from fairpca.tasks.record import SplitSizes

    candidates = [
        {"role": "majority", "validation_rows": 12211, "classifier": "majority", "accuracy": 0.76},
        {"role": "chosen", "validation_rows": 12211, "variant": "fair_pca", "accuracy": 0.77},
        {"role": "λ=0", "validation_rows": 2500, "variant": "fair_pca", "accuracy": 0.83},
    ]
    return replaced(
        record, candidates=candidates, searched_validation_rows=2500,
        split_sizes=SplitSizes(train=24421, validation=12211, test=12210),
    )  # fmt: skip


def test_every_validation_number_says_which_rows_it_comes_from(audit_record):
    """After a wide search the sweep's numbers are the sample's and the chosen model's every
    validation row's: the headings and the rows column say which, from the record."""
    record = _searched_on_a_sample(audit_record)
    sections = dict(report_sections(record))
    sample, every = "validation sample (2,500 rows)", "validation rows (12,211)"
    candidates = next(h for h in sections if h.startswith("Candidates"))
    assert f"on the {sample}; the baselines and the chosen candidate on the {every}" in candidates
    assert f"Trade-off on the {sample}" in sections
    reported = sections["Validation and test rows of the chosen candidate and the baselines"]
    assert set(reported["rows"]) == {every, "test rows (12,210)"}
    assert record.validation_label() == every and record.searched_label == sample
    # searched on every row: one label, every row's
    whole = replaced(record, searched_validation_rows=12211, candidates=record.candidates[:2])
    headings = [h for h, _ in report_sections(whole)]
    assert f"Trade-off on the {every}" in headings
    assert any(h.startswith("Candidates") and h.endswith(f"all on the {every}") for h in headings)


def test_a_choice_by_cross_validation_names_the_rows_it_was_made_on(audit_record):
    """A small table is chosen on its cross-validated training and validation rows: the
    verdict says so, not "the validation rows"."""
    from fairpca.tasks.record import SplitSizes

    chosen_by = "repeated stratified 5-fold cross-validation (3 repeats) on the 750 training+..."
    record = replaced(audit_record, "selection", chosen_by=chosen_by)
    record = replaced(record, split_sizes=SplitSizes(train=500, validation=250, test=250))
    assert build_verdict(record).rows_label == "cross-validated training+validation rows (750)"
    assert build_verdict(audit_record).rows_label == audit_record.validation_label()


def test_the_intersection_cells_the_gate_did_not_judge_are_named_on_their_rows(audit_record):
    """Every cell of the intersection table says whether the gate judged it."""
    from fairpca.tasks.report import NOT_JUDGED

    record = _reviewed(audit_record)
    cells = [g for h, g in report_sections(record) if h.startswith("Intersection groups")]
    assert cells, "the fixture has intersection groups"
    assert set(cells[0]["gate (validation rows)"]) == {"judged"}
    record = replaced(record, cells_not_judged=list(cells[0]["group"])[:1])
    (frame,) = [g for h, g in report_sections(record) if h.startswith("Intersection groups")]
    assert frame["gate (validation rows)"].iloc[0] == NOT_JUDGED


def test_a_version_without_a_graph_says_so_on_every_surface(audit_record):
    """An audit that saved no ONNX graph warns, in the verdict that the report, the card and the
    run description share, that the gate will fail the version; a graph adds no warning."""
    from fairpca.tasks.onnx_runtime import NO_GRAPH as NO_GRAPH_REASON
    from fairpca.tasks.record import OnnxGraphRecord
    from fairpca.tasks.report import build_verdict, render_model_card

    reason = f"{NO_GRAPH_REASON} (no exact converter: FairKernelPCA)"
    missing = replaced(audit_record, onnx=OnnxGraphRecord(status="no_converter", reason=reason))
    assert reason in build_verdict(missing).warnings
    assert NO_GRAPH_REASON in render_model_card(missing)
    exported = OnnxGraphRecord(status="exported", sha256="a" * 64, rows_checked=10)
    with_graph = replaced(audit_record, onnx=exported)
    assert build_verdict(with_graph).warnings == build_verdict(audit_record).warnings
    assert NO_GRAPH_REASON not in render_model_card(with_graph)


def test_the_intersection_table_shows_each_cells_test_rows_and_three_decimals(audit_record):
    """Issue 49: the intersection table showed ``rows`` as "-" and the rates with 4-5
    decimals. Each published cell shows its test rows (``cell_rows.<cell>``, thousands
    separated) and its rates as every other table does (3 decimals)."""
    from fairpca.tasks.report import report_sections

    cells = {"sex:Female/race:White": (1234.0, 0.12345), "sex:Male/race:White": (2345.0, 0.23456)}
    test = dict(audit_record.selection.test)
    for cell, (rows, rate) in cells.items():
        test |= {f"cell_rows.{cell}": rows, f"selection_rate.{cell}": rate,
                 f"tpr.{cell}": rate, f"fpr.{cell}": rate / 2}  # fmt: skip
    record = replaced(audit_record, "selection", test=test)
    sections = dict(report_sections(record))
    title = next(t for t in sections if t.startswith("Intersection groups"))
    frame = sections[title]
    assert frame["rows"].tolist() == ["1,234", "2,345"]
    rates = frame.drop(columns=["group", "rows", "gate (validation rows)"])
    assert rates.map(lambda v: bool(re.fullmatch(r"\d\.\d{3}|-", v))).all().all()
    assert "0.123" in rates.iloc[0].tolist()


def test_the_run_descriptions_first_line_holds_decision_reason_and_group_rates(audit_record):
    """Issue 51: the MLflow run page shows a description's first line before "Show more": it
    holds the decision, what decided it, and the chosen model's selection rate per published
    group (withheld groups left out)."""
    from fairpca.tasks.report import build_verdict, run_description, verdict_markdown

    rates = {"selection_rate.sex:Female": 0.174, "selection_rate.sex:Male": 0.171}
    record = replaced(audit_record, "selection", test={**audit_record.selection.test, **rates})
    first = run_description(record).splitlines()[0]
    verdict = build_verdict(record)
    assert first.startswith(verdict.line)
    assert first.endswith("Selection rate on the test rows: sex: Female 0.174, Male 0.171.")
    assert "Selection rate" not in verdict_markdown(record).splitlines()[0]  # not compact
