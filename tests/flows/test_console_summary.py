"""The printed summary says what happened in the registry in the run tag's words, links the
run list's verdict view, carries no MLflow progress bar, and never breaks a printed path or
command (``flows/console.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _result(**overrides):
    """An :class:`AuditResult` that did not promote: champion v1 stays, version 1 is the fit."""
    from records import build_audit_record, replaced

    from fairpca.flows.audit import AuditResult
    from fairpca.tasks.record import PromotionRecord

    values = dict(
        record=replaced(build_audit_record(), model_name="fairpca-adult-x-sex"),
        promotion=PromotionRecord(promote=False, reasons=["champion v1: the same fit"]),
        output_dir="/tmp/out", report_path="/tmp/out/report.html",
        tracking_uri="sqlite:///mlflow.db", run_id="f79fe6b6ef204cf6bc432b7163157ac2",
        experiment_id="7", model_version="1", model_version_new=True, champion_moved=False,
    )  # fmt: skip
    return AuditResult(**{**values, **overrides})


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        (False, "NOT promoted, same fit as version 1; nothing registered; 'champion' stays on v1."),
        (True, "NOT promoted, v1 registered; 'champion' stays on v1."),
    ],
)
def test_a_repeated_audit_says_nothing_was_registered(new, expected):
    from fairpca.flows.console import decision_line

    line = decision_line(_result(model_version_new=new), before="1")
    assert line.replace("[yellow]", "").replace("[/yellow]", "") == f"Decision: {expected}"


def test_the_printed_run_list_link_opens_the_verdict_view_the_run_wrote(tmp_path):
    """Issue 51: the printed run list was the plain one (run name, created, dataset). It is
    the experiment's shared view, which the logging's first step stores in a real MLflow
    store: the link's ``viewStateShareKey`` names that experiment tag, whose columns are the
    description (the decision) and the headline metrics."""
    import json
    from urllib.parse import parse_qs, urlsplit

    from mlflow import MlflowClient
    from records import build_audit_record

    from fairpca.flows.console import mlflow_ui_lines
    from fairpca.tasks.mlflow_logging import RUN_LIST_METRICS, start_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = build_audit_record()
    run_id, experiment_id = start_run.fn(MlflowClient(uri), uri, record, "attempt-1")
    printed = _printed(_result(record=record, tracking_uri=uri, run_id=run_id,
                               experiment_id=experiment_id), width=250)  # fmt: skip
    runs = printed.split("Runs: ", 1)[1].split()[0]
    key = parse_qs(urlsplit(runs).fragment.split("?", 1)[1])["viewStateShareKey"][0]
    assert runs.startswith(f"http://127.0.0.1:5000/#/experiments/{experiment_id}/runs?")
    tags = MlflowClient(uri).get_experiment(experiment_id).tags
    view = json.loads(tags[f"mlflow.sharedViewState.{key}"])
    assert view["selectedColumns"] == [
        "attributes.`Description`",
        *(f"metrics.`{m}`" for m in RUN_LIST_METRICS),
    ]
    remote = dict(mlflow_ui_lines(_result(tracking_uri="https://mlflow.example.org/")))
    assert remote["Runs:"] == (
        f"https://mlflow.example.org/#/experiments/7/runs?viewStateShareKey={key}"
    )


@pytest.mark.parametrize(
    ("moved", "refused", "word"),
    [(True, False, "promoted"), (False, False, "not promoted"), (False, True, "refused")],
)
def test_the_terminal_and_the_run_tag_say_the_decision_in_the_same_words(moved, refused, word):
    """Issue 51: the run tag ``fairpca.decision`` and the terminal's ``Decision:`` line name
    the outcome from one place: promoted, not promoted, or refused (the audit promoted a model
    that lost a protected alias before, which may not take one back)."""
    from fairpca.flows.console import decision_line
    from fairpca.tasks.decision import OUTCOMES, outcome
    from fairpca.tasks.record import PromotionRecord
    from fairpca.tasks.report import build_verdict

    promotion = PromotionRecord(promote=moved, refused=refused, reasons=["champion v1: x"])
    result = _result(promotion=promotion, champion_moved=moved)
    assert outcome(promotion, moved) == word and OUTCOMES[word].lower() == word
    line = decision_line(result, before="1")
    said = line.split(":", 1)[1].split("[/", 1)[0].split("]", 1)[1]
    assert said == OUTCOMES[word]
    verdict = build_verdict(result.record, promotion)
    assert verdict.line.startswith(OUTCOMES[word])  # the Prefect log line, the report


def test_no_mlflow_progress_bar_unless_verbose(tmp_path):
    """Loading a champion downloads its files: MLflow's ``Downloading artifacts`` bar must
    not land in the summary; with ``--verbose`` it may."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "MLmodel").write_text("flavors: {}\n")
    code = (
        "import sys\n"
        "from fairpca.flows.console import show_logs\n"
        "import mlflow.artifacts\n"
        "show_logs(sys.argv[1] == 'verbose')\n"
        "mlflow.artifacts.download_artifacts(artifact_uri=sys.argv[2], dst_path=sys.argv[3])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"}
    printed = {}
    for mode in ("quiet", "verbose"):
        done = subprocess.run(
            [sys.executable, "-c", code, mode, str(tmp_path / "model"), str(tmp_path / mode)],
            capture_output=True, text=True, timeout=300, check=True, env=env,
        )  # fmt: skip
        assert any((tmp_path / mode).rglob("MLmodel"))  # downloaded
        printed[mode] = done.stdout + done.stderr
    assert "Downloading artifacts" not in printed["quiet"]
    assert "Downloading artifacts" in printed["verbose"]  # the check above can see the bar


def _printed(result, verbose: bool = False, width: int = 120) -> str:
    import io

    from rich.console import Console

    from fairpca.flows import console as shown

    out = Console(width=width, file=io.StringIO(), record=True)
    original, shown.console = shown.console, out
    try:
        shown.print_report(result, "1", verbose=verbose)
    finally:
        shown.console = original
    return " ".join(out.export_text().split())


@pytest.mark.parametrize(
    ("eligible", "promote", "label"),
    [
        (False, False, "Best candidate (not eligible, not registered)"),
        (True, False, "Chosen for review (not promoted)"),
        (True, True, "Chosen"),
    ],
)
def test_the_intervals_name_the_candidate_as_the_headline_does(eligible, promote, label):
    """A candidate that was never eligible (or not promoted) is not "Chosen" under the test
    table either: the intervals' note uses the headline's name."""
    from records import replaced

    from fairpca.tasks.record import Eligibility

    base = _result()
    record = replaced(base.record, "selection.decision", promote=promote)
    record = replaced(record, eligibility=Eligibility(rules={}, chosen_passes=eligible, reasons=[]))
    words = _printed(_result(record=record))
    assert f"{label} on the validation rows" in words
    assert f"{label}, 95% intervals: acc 0.811–0.832" in words
    if label != "Chosen":
        assert "Chosen, 95% intervals" not in words


def test_the_candidates_caption_names_the_sample_and_every_row():
    from records import replaced

    from fairpca.tasks.record import SplitSizes

    candidates = [
        {"role": "chosen", "validation_rows": 12211, "variant": "fair_pca", "accuracy": 0.77},
        {"role": "λ=0", "validation_rows": 2500, "variant": "fair_pca", "accuracy": 0.83},
    ]
    record = replaced(
        _result().record, candidates=candidates, searched_validation_rows=2500,
        split_sizes=SplitSizes(train=24421, validation=12211, test=12210),
    )  # fmt: skip
    words = _printed(_result(record=record), verbose=True, width=200)
    assert "Chosen on the validation rows (12,211): fair_pca/logreg@lambda=0.125" in words
    assert (
        "The λ rows on the validation sample (2,500 rows); the baselines and the chosen "
        "candidate on the validation rows (12,211)." in words
    )


def test_bidirectional_controls_in_names_are_shown_escaped_in_the_terminal():
    """Issue 53: U+202E in a group name was printed raw, so the name read reversed. The
    group table, the column screening and the warnings show each control as ``<U+202E>``."""
    from records import CONTROLS, with_bidi_names

    record = with_bidi_names(_result().record)
    screening = [{"action": "excluded", "column": s.column, "rule": s.rule, "score": None}
                 for s in record.screening]  # fmt: skip
    printed = _printed(_result(record=record, screening=screening), verbose=True)
    assert not set(printed) & set(CONTROLS)
    assert "A<U+202E>1 puorG" in printed  # the group table and the warning
    assert "id\\u202a\\u202b" in printed  # the screened column, quoted as Python does


def test_the_terminal_marks_the_references_that_meet_the_gate():
    """Issue 49: the terminal's table of models did not say which references meet the gate.
    A reference that meets it on the validation rows is marked ``✓`` (explained under the
    table); one that does not, or was not measured there, is not."""
    from records import build_audit_record, replaced

    from fairpca.flows.console import _notes, headline_table
    from fairpca.tasks.record import ReferenceMitigation
    from fairpca.tasks.report import build_verdict

    record = build_audit_record()
    references = [
        ReferenceMitigation(
            name=name,
            approach="reductions",
            needs_sensitive_at_prediction=False,
            validation={"accuracy": 0.8},
            test=dict(record.selection.test),
            meets_gate=meets,
        )
        for name, meets in (("meets", True), ("fails", False), ("unmeasured", None))
    ]
    verdict = build_verdict(replaced(record, references=references))
    names = headline_table(verdict).columns[0]._cells
    assert "meets✓" in names and "fails" in names and "unmeasured" in names
    assert "✓ a reference that meets the gate on the validation rows." in _notes(verdict)
    assert "✓" not in _notes(build_verdict(replaced(record, references=references[1:])))


def test_a_command_in_an_error_message_is_never_broken_inside_a_path(tmp_path, monkeypatch):
    """Issue 51: at 80 columns rich broke the ``fairpca relog`` command of a failed logging
    inside its paths, so a pasted command was wrong. Prose wraps at spaces, a path longer
    than a line stands whole on a line of its own, and the command is on lines of its own,
    broken between its words with continuations: pasted into a shell it is the command."""
    import io
    import shlex

    from rich.console import Console

    from fairpca.flows import console as shown
    from fairpca.tasks.mlflow_logging import relog_hint

    out_dir = tmp_path / ("a-rather-long-folder-name/" * 3) / "audit-adult-20261207T2140Z-abc"
    store = f"sqlite:///{tmp_path / ('another-long-folder-name/' * 3) / 'mlflow.db'}"
    err = Console(width=80, file=io.StringIO(), record=True)
    monkeypatch.setattr(shown, "err_console", err)
    with pytest.raises(SystemExit):
        shown.fail("MLflow logging failed", f"Kept in {out_dir}; {relog_hint(out_dir, store)}")
    lines = err.export_text().splitlines()
    assert all(len(line) <= 80 or " " not in line.strip().removesuffix(" \\") for line in lines)
    assert any(line.strip().startswith(str(out_dir)) for line in lines)  # whole, in the prose
    assert any(line.strip().startswith(f"({store})") for line in lines)
    start = next(i for i, line in enumerate(lines) if line.startswith("fairpca relog"))
    end = next(i for i in range(start, len(lines)) if not lines[i].endswith("\\"))
    command = " ".join(line.rstrip("\\") for line in lines[start : end + 1])
    assert shlex.split(command) == ["fairpca", "relog", str(out_dir), "--tracking-uri", store]
