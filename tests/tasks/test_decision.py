"""The decision as data (``tasks/decision.py``): every kind of reason rendered by the one
renderer on every surface, the deployment read from the config, the terminal showing every
reason that decided."""

from __future__ import annotations

import io

import pytest
from records import build_audit_record, replaced

from fairpca.tasks.decision import (
    GATE_KINDS,
    RULES,
    Decision,
    Deployment,
    Kind,
    Reason,
    deciding_words,
    render,
)
from fairpca.tasks.onnx_runtime import NO_GRAPH
from fairpca.tasks.record import AuditRecord, PromotionRecord

MARGINS = {"margin": 0.021, "margin_low": 0.008, "margin_high": 0.033}
# One reason of every kind, as the steps of the choice make them.
EVERY_KIND = {
    Kind.CHOSEN: Reason(kind=Kind.CHOSEN, decides=True, subject="fair_pca/logreg@k=10,lambda=0",
                        measure="balanced_accuracy", rows="validation",
                        numbers={"value": 0.757, "passing": 4, "candidates": 40}),
    Kind.UNSTABLE: Reason(kind=Kind.UNSTABLE, decides=True, rows="validation",
                          numbers={"passing": 2}, facts=("DP difference 0.0400 is within 1",)),
    Kind.NOT_ELIGIBLE: Reason(kind=Kind.NOT_ELIGIBLE, decides=True, subject="pca/logreg",
                              rows="validation", flags=("none_eligible",),
                              facts=("predicts one class for 100.0% of the rows",)),
    Kind.FAILS_GATE: Reason(kind=Kind.FAILS_GATE, decides=True, subject="fair_pca/logreg",
                            rows="validation", facts=("DP difference 0.0700 > max 0.05",)),
    Kind.TOO_LITTLE_DATA: Reason(kind=Kind.TOO_LITTLE_DATA, decides=True,
                                 rows="cross-validated training+validation",
                                 flags=("certification",), facts=("resolved to +/-0.06",)),
    Kind.DOMINATED: Reason(kind=Kind.DOMINATED, decides=True, subject="correlation_remover",
                           measure="balanced_accuracy", rows="validation", numbers=MARGINS,
                           needs=("sensitive_at_prediction",)),
    Kind.EXCLUDED_BY_DEPLOYMENT: Reason(
        kind=Kind.EXCLUDED_BY_DEPLOYMENT, subject="threshold_optimizer",
        measure="balanced_accuracy", rows="validation", numbers=MARGINS,
        needs=("sensitive_at_prediction", "randomized_decisions")),
    Kind.BETTER_REFERENCE: Reason(kind=Kind.BETTER_REFERENCE, subject="exponentiated_gradient",
                                  measure="balanced_accuracy", rows="validation",
                                  numbers={"margin": 0.004, "margin_low": -0.01,
                                           "margin_high": 0.018}),
    Kind.NOTE: Reason(kind=Kind.NOTE, facts=("a note the reader needs",)),
    Kind.PROMOTED: Reason(kind=Kind.PROMOTED, decides=True, facts=("no current champion",)),
    Kind.CHAMPION_STAYS: Reason(kind=Kind.CHAMPION_STAYS, decides=True, rows="test",
                                facts=("champion v3: the challenger is worse",)),
    Kind.DEMOTED: Reason(kind=Kind.DEMOTED, decides=True,
                         facts=("champion v3 fails the gate on the new rows",)),
}  # fmt: skip


def _rule(*flags: str, measure: str = "", **numbers: float) -> Reason:
    return Reason(kind=Kind.FAILS_RULE, decides=True, measure=measure, rows="reference",
                  numbers=numbers, flags=flags)  # fmt: skip


# The fairness gate's verdict on a registered version (fairpca.flows.gate): one reason of
# each of its kinds, and of each rule a measurement can fail (raw numbers, as judged).
GATE_REASONS = {
    "gate": _rule("gate", "bound", measure="dp_difference", value=0.12345, limit=0.1),
    "gate floor": _rule("gate", "intersection", "minimum", measure="selection_rate_ratio",
                        value=0.61234, limit=0.8),
    "accuracy undefined": _rule("gate", "bound", "minimum", measure="accuracy", limit=0.6),
    "undefined": _rule("undefined", "intersection", measure="eo_difference"),
    "majority": _rule("majority", measure="balanced_accuracy", value=0.51234, baseline=0.5,
                      gain=0.02),
    "chance": _rule("chance", measure="balanced_accuracy", value=0.52345, low=0.49876,
                    margin=0.02),
    "says_yes": _rule("says_yes", measure="positive_rate", rate=0.01234, base=0.24567,
                      ratio=0.25),
    "says_no": _rule("says_no", measure="positive_rate", rate=0.98765, base=0.24567,
                     ratio=0.25),
    "one_class": _rule("one_class", measure="one_class_share", share=0.99712, limit=0.98),
    "no_metrics": _rule("no_metrics"),
    "no_rates": _rule("no_rates"),
    Kind.NO_GRAPH: Reason(kind=Kind.NO_GRAPH, decides=True, facts=(NO_GRAPH,)),
    Kind.EVALUATION_ERROR: Reason(kind=Kind.EVALUATION_ERROR, decides=True, subject="OSError"),
    Kind.BUDGET_SPENT: Reason(kind=Kind.BUDGET_SPENT, decides=True,
                              numbers={"limit": 10, "free_at": 1_800_000_000.0}),
}  # fmt: skip
EVERY_KIND[Kind.FAILS_RULE] = GATE_REASONS["gate"]
EVERY_KIND.update({kind: GATE_REASONS[kind] for kind in GATE_KINDS if kind != Kind.FAILS_RULE})
AUDIT_KINDS = [kind for kind in Kind if kind not in GATE_KINDS]


def test_every_kind_has_a_reason_here_and_a_sentence():
    assert set(EVERY_KIND) == set(Kind)
    for kind, reason in EVERY_KIND.items():
        text = render(reason)
        assert text and "{" not in text and "None" not in text, (kind, text)
        assert reason.subject in text


def _terminal(result, verbose: bool = False) -> str:
    from rich.console import Console

    from fairpca.flows import console as shown

    out = Console(width=200, file=io.StringIO(), record=True)
    original, shown.console = shown.console, out
    try:
        shown.print_report(result, verbose=verbose)
    finally:
        shown.console = original
    return " ".join(out.export_text().split())


def _surfaces(record: AuditRecord, promotion: PromotionRecord) -> dict[str, str]:
    """Every text an audit's decision appears in, whitespace folded."""
    from fairpca.flows.audit import AuditResult
    from fairpca.tasks.report import (
        render_html,
        render_markdown,
        render_model_card,
        report_sections,
        run_description,
        version_description,
    )

    sections = report_sections(record, promotion)
    result = AuditResult(
        record=record, promotion=promotion, output_dir="/tmp/out",
        report_path="/tmp/out/report.html", tracking_uri="sqlite:///mlflow.db", run_id="r1",
        experiment_id="1", model_version="2", model_version_new=True, champion_moved=False,
    )  # fmt: skip
    texts = {
        "report.md": render_markdown("t", sections, "tradeoff.png"),
        "report.html": render_html("t", sections, None),
        "model card": render_model_card(record, promotion),
        "run description": run_description(record, promotion),
        "version description": version_description(record, "r1", None, promotion),
        "terminal": _terminal(result),
        "terminal --verbose": _terminal(result, verbose=True),
    }
    return {name: " ".join(text.split()) for name, text in texts.items()}


@pytest.mark.parametrize("kind", AUDIT_KINDS)
def test_every_reason_kind_is_rendered_on_every_surface(kind):
    """Each kind that decides against promotion leads the audit's reasons; the terminal shows
    every reason that decided (or names an alternative), the report, card and MLflow
    descriptions every reason, all in the one renderer's words (escaped per surface)."""
    from markupsafe import escape

    from fairpca.tasks.report import markdown_text

    reason = EVERY_KIND[kind]
    champion = kind in (Kind.PROMOTED, Kind.CHAMPION_STAYS, Kind.DEMOTED)
    record = build_audit_record()
    chosen = record.selection.decision.reasons[0]
    promote = kind in (Kind.CHOSEN, Kind.NOTE, Kind.BETTER_REFERENCE, Kind.EXCLUDED_BY_DEPLOYMENT)
    reasons = [chosen] if champion else [reason] if kind == Kind.CHOSEN else (
        [chosen, reason] if promote else [reason, chosen]
    )  # fmt: skip
    record = replaced(record, "selection.decision", promote=promote or champion, reasons=reasons)
    record = replaced(record, decision=record.selection.decision)
    accounts = [*reason.facts] if champion else ["no current champion: the gate alone decides"]
    promotion = PromotionRecord(
        promote=kind == Kind.PROMOTED, demote=kind == Kind.DEMOTED,
        reasons=accounts + ["the audit did not promote the challenger"] * (kind == Kind.DEMOTED),
    )  # fmt: skip
    sentence = " ".join(render(reason).split())
    # the terminal without --verbose: every reason that decided or names an alternative, but
    # the chosen one of a promotion, which its "Meets the gate" sentence states
    brief = reason.decides or kind in (Kind.DOMINATED, Kind.EXCLUDED_BY_DEPLOYMENT)
    for surface, text in _surfaces(record, promotion).items():
        if surface == "terminal" and kind == Kind.CHOSEN:
            assert "Meets the gate" in text  # what the chosen reason says, stated once
            continue
        if surface == "terminal" and not brief:
            assert "more in the report (or run with --verbose)" in text
            continue
        shown = {
            "report.html": str(escape(sentence)),
            "terminal": sentence,
            "terminal --verbose": sentence,
        }.get(surface, markdown_text(sentence))
        # the "why" sentence starts with a capital, the descriptions cut a reason at 300
        # characters: compare from the second character on, the first 250
        assert shown[1:250] in text, (surface, kind)


def test_the_verdict_reads_what_decided_from_the_kind_never_from_the_words():
    """Two reasons with the same kind and different facts decide alike; a note never
    decides."""
    veto = EVERY_KIND[Kind.DOMINATED]
    assert deciding_words(veto) == "dominated by correlation_remover"
    assert deciding_words(EVERY_KIND[Kind.FAILS_GATE]) == "fails the gate"
    assert deciding_words(EVERY_KIND[Kind.UNSTABLE]) == "too little data"
    decision = Decision(False, (EVERY_KIND[Kind.NOTE], veto))
    assert decision.deciding is veto
    assert Decision(True, (EVERY_KIND[Kind.NOTE],)).deciding is None


def test_the_record_stores_the_structured_reasons_and_reads_them_back(tmp_path):
    """audit.json holds every field of every reason (the rows it was measured on among
    them); a record of an earlier fairpca, whose reasons are sentences, is refused with a
    message that says so."""
    import json

    from fairpca.tasks.record import read_audit_record, write_audit_record

    reasons = [EVERY_KIND[kind] for kind in AUDIT_KINDS]
    record = replaced(build_audit_record(), "selection.decision", promote=False, reasons=reasons)
    path = tmp_path / "audit.json"
    write_audit_record(path, record)
    written = json.loads(path.read_text())["selection"]["decision"]["reasons"]
    assert [r["kind"] for r in written] == [k.value for k in AUDIT_KINDS]
    assert written[4]["rows"] == "cross-validated training+validation"
    assert read_audit_record(path).selection.decision.reasons == reasons
    old = json.loads(path.read_text())
    old["selection"]["decision"]["reasons"] = ["dominated: the reference ..."]
    path.write_text(json.dumps(old))
    with pytest.raises(ValueError, match="earlier fairpca"):
        read_audit_record(path)


def test_the_deployment_is_read_from_the_config_and_carried_by_the_policy():
    """Off by default; the two options set it; the policy's record, tags (read back) and
    description carry it."""
    from fairpca.flows.config import AuditConfig
    from fairpca.tasks.select import POLICY_TAG, GatePolicy

    default = GatePolicy.from_config(AuditConfig(dataset="adult").selection)
    assert default.deployment == Deployment(False, False)
    both = AuditConfig(dataset="adult", sensitive_at_prediction=True, randomized_decisions=True)
    policy = GatePolicy.from_config(both.selection)
    assert policy.deployment == Deployment(True, True)
    assert GatePolicy.from_tags(policy.tags()).deployment == policy.deployment
    assert '"randomized_decisions": true' in policy.tags()[POLICY_TAG]
    assert policy.record()["deployment"] == {
        "sensitive_at_prediction": True, "randomized_decisions": True,
    }  # fmt: skip
    assert "may not use" in default.description() and "may not use" not in policy.description()
    old_tag = {POLICY_TAG: '{"name": "demographic_parity", "bound": "point", "thresholds": {}}'}
    assert GatePolicy.from_tags(old_tag).deployment == Deployment()


def _version(client, name: str) -> str:
    """A registered version to record verdicts on (its files are never read here)."""
    client.create_registered_model(name)
    return client.create_model_version(name, "/nowhere/model").version


def _surface(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("withheld", [False, True], ids=["published", "withheld"])
@pytest.mark.parametrize("name", list(GATE_REASONS))
def test_every_gate_reason_is_rendered_on_the_gate_surfaces(mlflow_store, name, withheld):
    """The gate's verdict (``record_verdict``): its reasons tag and its card (the Prefect
    artifact's text) show each reason in the one renderer's words, from the reason as
    published: numbers rounded to two decimals, the measured ones withheld on small groups;
    never a raw number."""
    from fairpca.flows import gate
    from fairpca.tasks.report import markdown_text

    _, client = mlflow_store
    model = f"decision-gate-{str(name).replace(' ', '-').replace('_', '-')}-{withheld:d}"
    version = _version(client, model)
    reason = GATE_REASONS[name]
    metrics = {"accuracy": 0.81234, "dp_difference": 0.04567}
    why = gate.WITHHELD if withheld else None
    shown = gate.record_verdict(client, model, version, gate.FAILED, [reason], metrics,
                                {"reference data": "reference.csv"}, withheld=why)  # fmt: skip
    assert shown == gate.published_reasons([reason], why)
    assert all(r.kind == reason.kind and r.flags[: len(reason.flags)] == reason.flags
               for r in shown)  # fmt: skip
    sentence = _surface(render(shown[0]))
    entry = client.get_model_version(model, version)
    assert entry.tags[gate.REASONS_TAG] == sentence
    assert markdown_text(sentence) in _surface(entry.description)
    raw = {f"{v:.4f}" for v in reason.numbers.values()} | {"99.7%", "1.2%", "24.6%", "98.8%"}
    for surface in (entry.tags[gate.REASONS_TAG], entry.description):
        assert not any(number in surface for number in raw), surface
    measured = {"value", "low", "baseline", "rate", "base", "share"} & set(reason.numbers)
    if withheld and measured:
        assert not measured & set(shown[0].numbers) and "(withheld)" in sentence
    elif measured:
        assert {k: round(v, 2) for k, v in reason.numbers.items()} == shown[0].numbers


def test_every_gate_rule_and_kind_has_a_reason_here():
    assert {r.flags[0] for r in GATE_REASONS.values() if r.kind == Kind.FAILS_RULE} == set(RULES)
    assert {r.kind for r in GATE_REASONS.values()} == set(GATE_KINDS)


@pytest.mark.flow
def test_the_gate_artifact_shows_the_verdicts_reasons_in_order(prefect_harness, mlflow_store):
    """Inside a flow run the card is also a Prefect Markdown artifact: the same ordered
    reasons as the tag."""
    from prefect import flow
    from prefect.artifacts import Artifact

    from fairpca.flows import gate
    from fairpca.tasks.report import markdown_text

    _, client = mlflow_store
    model = "decision-gate-artifact"
    version = _version(client, model)
    reasons = [GATE_REASONS[name] for name in ("gate", "chance", "one_class")]

    @flow
    def judge():
        return gate.record_verdict(client, model, version, gate.FAILED, reasons, {}, {})

    shown = judge()
    artifact = Artifact.get(f"fairness-gate-{model}-{version}")
    sentences = [markdown_text(_surface(render(r))) for r in shown]
    text = _surface(artifact.data)
    assert all(s in text for s in sentences)
    assert [text.index(s) for s in sentences] == sorted(text.index(s) for s in sentences)
    tag = client.get_model_version(model, version).tags[gate.REASONS_TAG]
    assert tag == "; ".join(_surface(render(r)) for r in shown)
