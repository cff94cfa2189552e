"""The card, the run and version descriptions and the Prefect verdict: what they say, that
the registry's 5,000-character limit always holds, and that no markup from the user's data
survives in them."""

from __future__ import annotations

import pytest
from records import replaced

from fairpca.tasks.decision import Kind, Reason, render
from fairpca.tasks.record import PromotionRecord, ReferenceMitigation, ScreenedColumn
from fairpca.tasks.registry import run_ui_url
from fairpca.tasks.report import (
    COMPLEMENTARY,
    DESCRIPTION_MAX_CHARS,
    build_verdict,
    markdown_text,
    render_model_card,
    run_description,
    verdict_markdown,
    version_description,
)

PROMOTED = PromotionRecord(promote=True, reasons=["no current champion: the gate alone decides"])
IMG = "<img src=x onerror=alert(1)>"
SCRIPT = "<script>alert(2)</script>"
LINK = "[x](javascript:alert(3))"
TICK = "a` <b onmouseover=alert(4)>b</b> `c"


def _hostile(record):
    """``record`` with every user-supplied string (column names, group labels, file name,
    label) set to an injection payload, as a crafted CSV would produce them."""
    record = replaced(record, "provenance.definition", label=LINK, source=IMG, sensitive=[SCRIPT])
    record = replaced(
        record, "provenance.data_source",
        kind="file", name=f"{TICK}.csv", sha256={f"{TICK}.csv": "f" * 64},
    )  # fmt: skip
    test = {
        **record.selection.test,
        f"dp_difference.{SCRIPT}": 0.01,
        f"selection_rate.{SCRIPT}:{IMG}": 0.2,
        f"tpr.{SCRIPT}:{TICK}": 0.6,
    }
    record = replaced(
        record, "selection",
        group_sizes={SCRIPT: {IMG: 300, TICK: 200, LINK: "suppressed"}},
        test=test, warnings=[f"column {IMG} predicts {SCRIPT}"],
    )  # fmt: skip
    small = Reason(kind=Kind.NOTE, facts=(f"group {LINK} of {TICK} is small",))
    record = replaced(record, "selection.decision", reasons=[small])
    params = {**record.params, "label": LINK, "data": f"/data/{TICK}.csv", "sensitive": SCRIPT}
    screened = [ScreenedColumn(column=IMG, rule=LINK, score=0.97, action="excluded")]
    return replaced(record, sensitive=[SCRIPT], screening=screened, params=params)


def _rendered(markdown: str) -> str:
    """HTML as a CommonMark + tables renderer makes it (the MLflow UI's kind)."""
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").enable("table").render(markdown)


def _texts(record) -> dict[str, str]:
    return {
        "card": render_model_card(record),
        "run description": run_description(record),
        "version description": version_description(
            record, "0123abcd", run_ui_url("http://mlflow:5000", "7", "0123abcd", "model_card.md")
        ),
        "prefect verdict": verdict_markdown(record, heading=f"Fairness audit {TICK}"),
    }


def test_no_payload_survives_in_card_and_descriptions(audit_record):
    hostile = _hostile(audit_record)
    for where, text in _texts(hostile).items():
        for payload in (IMG, SCRIPT, LINK, TICK):
            assert payload not in text, (where, payload)
        html = _rendered(text)
        assert "<img" not in html and "<script" not in html and "<b " not in html, where
        assert "javascript:" not in html.replace("javascript:alert(3))", ""), where
        assert 'href="javascript' not in html, where
        codes = html.split("<code>")[1:]
        assert not any("alert" in code.split("</code>")[0] for code in codes), where
    # the payloads are shown as the literal text they are
    card_html = _rendered(_texts(hostile)["card"])
    assert "&lt;img src=x onerror=alert(1)&gt;" in card_html
    assert "[x](javascript:alert(3))" in card_html
    assert "a` &lt;b onmouseover=alert(4)&gt;b&lt;/b&gt; `c" in card_html


def _with_group_rates(record):
    rates = {"selection_rate.sex:Female": 0.1737, "tpr.sex:Female": 0.4615,
             "fpr.sex:Female": 0.1382, "selection_rate.sex:Male": 0.1706, "tpr.sex:Male": 0.39,
             "fpr.sex:Male": 0.07, "selection_rate.race:Black/sex:Male": 0.2}  # fmt: skip
    return replaced(record, "selection", test={**record.selection.test, **rates})


def test_the_first_line_is_the_decision_in_plain_text(audit_record):
    """The MLflow UI lists a description's first characters as they are: no Markdown."""
    audit_record = _with_group_rates(audit_record)
    kept = PromotionRecord(promote=False, reasons=["champion v1: the challenger is worse"])
    dominated = [Reason(kind=Kind.DOMINATED, decides=True, subject="exponentiated_gradient",
                        measure="balanced_accuracy", rows="validation",
                        numbers={"margin": 0.02, "margin_low": 0.01,
                                 "margin_high": 0.03})]  # fmt: skip
    records = {
        "promoted": (audit_record, PROMOTED),
        "kept": (audit_record, kept),
        "undecided": (audit_record,),
        "failed": (replaced(audit_record, "selection.decision", promote=False),),
        "dominated": (replaced(audit_record, "selection.decision", promote=False,
                               reasons=dominated),),
    }  # fmt: skip
    lines = {outcome: build_verdict(*args).line for outcome, args in records.items()}
    assert lines == {
        "promoted": "PROMOTED to champion: test ΔDP 0.023, accuracy 0.822.",
        "kept": "NOT promoted (the champion stays): test ΔDP 0.023, accuracy 0.822.",
        "dominated": "NOT promoted (dominated by exponentiated_gradient): test ΔDP 0.023, "
        "accuracy 0.822.",
        "undecided": "PASSES the gate: test ΔDP 0.023, accuracy 0.822.",
        "failed": "NOT promoted: test ΔDP 0.023, accuracy 0.822.",
    }
    for text in (run_description(audit_record, PROMOTED), version_description(
            audit_record, "abc123", None, PROMOTED, experiment_id="3")):  # fmt: skip
        first = text.splitlines()[0]  # the run's: with the groups' selection rates after it
        assert first.startswith(lines["promoted"]) and not set(first) & set("*_`[]|#\\")


@pytest.mark.parametrize(
    ("policy", "line"),
    [
        ("demographic_parity+four_fifths", "PROMOTED to champion: test ΔDP 0.023, accuracy 0.822."),
        ("equal_opportunity", "PROMOTED to champion under equal_opportunity: test ΔEO 0.061, "
         "accuracy 0.822."),
        ("four_fifths+equal_opportunity", "PROMOTED to champion under "
         "equal_opportunity+four_fifths: test ΔEO 0.061, accuracy 0.822."),
    ],
)  # fmt: skip
def test_the_headline_names_a_policy_other_than_the_default_and_its_own_measure(
    audit_record, policy, line
):
    """An equal-opportunity audit's headline says so and shows ΔEO, not ΔDP (the record has
    no selection-rate ratio: the four-fifths number is left out)."""
    record = replaced(audit_record, "policy", name=policy)
    assert build_verdict(record, PROMOTED).line == line
    assert run_description(record, PROMOTED).splitlines()[0] == line


def test_run_description_opens_with_the_verdict_and_a_compact_table(audit_record):
    references = [
        ReferenceMitigation(
            name="threshold_optimizer",
            approach="post-processing",
            needs_sensitive_at_prediction=True,
            validation={"accuracy": 0.8},
            test={"accuracy": 0.79, "accuracy.ci95_low": 0.77, "accuracy.ci95_high": 0.81},
        )
    ]
    record = _with_group_rates(replaced(audit_record, references=references))
    lines = run_description(record, PROMOTED).splitlines()
    # what the run page shows above "Show more" (100 px): the line, then a table of 2 rows
    assert lines[:6] == [
        "PROMOTED to champion: test ΔDP 0.023, accuracy 0.822. Selection rate on the test "
        "rows: sex: Female 0.174, Male 0.171.",
        "",
        "| test rows | accuracy | ΔDP | ΔEO | ΔDP ∩ |",
        "|:--|--:|--:|--:|--:|",
        "| chosen | 0.822 | 0.023 | 0.061 | 0.046 |",
        "| unconstrained PCA | 0.848 | 0.181 | 0.095 | 0.362 |",
    ]
    details = lines[6:]
    assert "| chosen | 0.822 (0.811–0.832) | 0.023 (0.003–0.043) | 0.061 (0.031–0.091) | " in (
        "\n".join(details)
    )
    assert "| majority class | 0.761 | 0.000 | - | - |" in details
    assert "| reference: threshold_optimizer (post-processing) | 0.790 (0.770–0.810) " in (
        "\n".join(details)
    )
    assert "| sex: Female | 1650 | 0.174 | 0.462 | 0.138 |" in details  # groups by name
    assert not any("Black/" in line or "/sex" in line for line in details)  # intersections: card
    assert "| race: Eskimo | withheld: fewer than 30 test rows | - | - | - |" in details
    # 480 rows in all, 120 of them test rows: withheld to hide a smaller group
    assert f"| race: Black | {COMPLEMENTARY} | - | - | - |" in details
    assert f"- {markdown_text(render(record.selection.decision.reasons[0]))}" in details
    assert "- fair_pca: a sensitive attribute is still predictable" in details
    assert any(line.startswith("Full model card: artifact `model_card.md`") for line in details)
    assert len(lines) < 45


def test_new_headline_metrics_join_the_verdict_when_measured(audit_record):
    audit_record.selection.test.update(
        {"balanced_accuracy": 0.7, "balanced_accuracy.ci95_low": 0.6,
         "balanced_accuracy.ci95_high": 0.8, "selection_rate_ratio": 0.9}
    )  # fmt: skip
    text = verdict_markdown(audit_record)
    assert "| test rows | accuracy | balanced accuracy | ΔDP | SR ratio | ΔEO | ΔDP ∩ |" in text
    assert "| 0.700 (0.600–0.800) | 0.023 (0.003–0.043) | 0.900 |" in text
    assert (
        text.splitlines()[0] == "PASSES the gate: test ΔDP 0.023, SR ratio 0.900, accuracy 0.822."
    )


def test_version_description_always_fits_and_links_the_card_and_the_report(audit_record):
    url = run_ui_url("https://u:pw@mlflow.example.org/", "3", "abc123", "model_card.md")
    assert url == (
        "https://***@mlflow.example.org/#/experiments/3/runs/abc123/artifactPath/model_card.md"
    )
    assert run_ui_url("sqlite:///m.db", "3", "abc123", "model_card.md") is None
    base = "https://***@mlflow.example.org/#/experiments/3/runs/abc123/artifactPath"
    link = (
        f"[Model card]({base}/model_card.md) · [Report]({base}/report/report.html) · "
        "`runs:/abc123/model_card.md`"
    )
    short = version_description(audit_record, "abc123", url, PROMOTED)
    assert link in short.splitlines()
    # a database store: links any MLflow UI of that store resolves (relative to the page)
    local = version_description(audit_record, "abc123", None, PROMOTED, experiment_id="3")
    assert (
        "[Model card](#/experiments/3/runs/abc123/artifactPath/model_card.md) · "
        "[Report](#/experiments/3/runs/abc123/artifactPath/report/report.html)"
    ) in local
    bare = version_description(audit_record, "abc123", None, PROMOTED)
    assert "Full model card: `runs:/abc123/model_card.md`; report: " in bare
    reasons = [Reason(kind=Kind.NOTE, facts=(f"reason {i}: " + "x" * 2000,)) for i in range(50)]
    audit_record = replaced(audit_record, "selection.decision", reasons=reasons)
    audit_record = replaced(audit_record, "selection", warnings=["warning " + "y" * 2000] * 50)
    long = version_description(audit_record, "abc123", url, PROMOTED)
    assert len(long) <= DESCRIPTION_MAX_CHARS < len(render_model_card(audit_record))
    assert link in long.splitlines()  # the links come before the reasons, never cut
    assert long.startswith("PROMOTED to champion") and "| majority class |" in long
    assert "more (see the model card)" in long


def test_card_shows_decoded_group_names_and_suppression(audit_record):
    card = render_model_card(audit_record)
    assert "| sex | Female | 1650 |" in card and "| sex | Male | 3350 |" in card
    assert "| race | Other | suppressed (< 30) |" in card


def _with_references_and_screening(record):
    test = {"accuracy": 0.8148, "balanced_accuracy": 0.6958, "dp_difference": 0.0188}
    references = [
        ReferenceMitigation(
            name="threshold_optimizer", approach="post-processing",
            needs_sensitive_at_prediction=True, validation=test, test=test,
        ),
        ReferenceMitigation(
            name="exponentiated_gradient", approach="reductions",
            needs_sensitive_at_prediction=False, validation=test, test=test,
        ),
    ]  # fmt: skip
    record.selection.test.update(
        {"balanced_accuracy": 0.6517, "selection_rate.sex:Female": 0.1737,
         "tpr.sex:Female": 0.4615, "fpr.sex:Female": 0.1382, "base_rate.sex:Female": 0.1098,
         "selection_rate.sex:Male": 0.1706}
    )  # fmt: skip
    screening = [
        ScreenedColumn(column="rank", rule="leakage", score=0.8312, action="excluded"),
        ScreenedColumn(column="gender_code", rule="proxy: recodes sex", action="excluded"),
    ]
    sizes = {"sex": {"Female": 1650, "Male": 3350}, "race": {"White": 4270}}
    record = replaced(record, "selection", test_group_sizes=sizes)
    return replaced(record, references=references, screening=screening)


def test_card_shows_references_group_rates_and_screening(audit_record):
    card = render_model_card(_with_references_and_screening(audit_record))
    test_table = card.split("## Test metrics beside the baselines and references")[1]
    test_table = test_table.split("## ")[0]
    header = next(line for line in test_table.splitlines() if line.startswith("| metric"))
    assert "threshold_optimizer (reference: post-processing, needs the sensitive" in header
    assert "exponentiated_gradient (reference: reductions) |" in header
    assert "| balanced_accuracy |" in test_table and "0.696" in test_table
    groups = card.split("## Per-group rates on the test rows")[1].split("## ")[0]
    assert "| sex | Female | 1650 | 0.174 | 0.462 | 0.138 | 0.110 |" in groups
    assert "| sex | Male | 3350 | 0.171 | - | - | - |" in groups  # not measured: a dash
    screening = card.split("## Column screening")[1].split("## ")[0]
    assert "| rank | leakage | 0.831 | excluded |" in screening
    assert "| gender_code | proxy: recodes sex | - | excluded |" in screening


def test_card_without_screened_columns_says_so(audit_record):
    assert "No column was excluded or kept" in render_model_card(
        replaced(audit_record, screening=[])
    )
