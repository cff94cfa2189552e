"""A sample audit record, and changing frozen (immutable) pydantic records in tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fairpca.tasks.record import AuditRecord


def replaced(model, path: str = "", **fields):
    """A copy of the frozen ``model`` with ``fields`` replaced in its part at the dotted
    ``path`` (``replaced(record, "selection.decision", reasons=[...])``), rebuilt upwards."""
    if not path:
        return model.model_copy(update=fields)
    head, _, rest = path.partition(".")
    return model.model_copy(update={head: replaced(getattr(model, head), rest, **fields)})


def build_audit_record() -> AuditRecord:
    """An audit of Adult with two sensitive attributes (race, sex), promoted; validated by
    :class:`AuditRecord`, so a renamed or missing key fails here."""
    from fairpca.tasks.record import AuditRecord

    return AuditRecord.model_validate(
        {
            "audit_id": "audit-adult-20261130T150000-abc123",
            "run_name": "audit-adult-20261130T150000-abc123",
            "kind": "audit",
            "experiment_name": "fairpca-audits",
            "model_name": "fairpca-adult-income_gt_50k-race_sex",
            "champion_alias": "champion",
            "register_model": True,
            "started_at": datetime(2026, 11, 30, 15, 0, 0, tzinfo=UTC),
            "ended_at": datetime(2026, 11, 30, 15, 0, 31, tzinfo=UTC),
            "sensitive": ["race", "sex"],
            "decision": {"promote": True, "reasons": ["legacy reason"]},
            "chosen": {"variant": "fair_pca", "classifier": "logreg", "accuracy": 0.83},
            "params": {
                "dataset": "adult",
                "k": "10",
                "thresholds.max_dp_difference": "0.05",
                "thresholds.max_eo_difference": "0.1",
                "thresholds.min_accuracy": "0.0",
                "min_group_size": "30",
                "resolved_tracking_uri": "https://alice:s3cret@mlflow.example.org/?token=abc",
                "api_token": "do-not-print",
            },
            "metrics": {"accuracy": 0.83},
            "metric_steps": [{"key": "fair_pca/lambda", "value": 0.125, "step": 1}],
            "tags": {"fairpca.audit_id": "audit-adult-20261130T150000-abc123"},
            "model_tags": {"fairness.chosen": "fair_pca/logreg@lambda=0.125"},
            "hashes": {
                "fair_pca/components_": "a" * 64,
                "fair_pca/mean_": "b" * 64,
                "pca/components_": "c" * 64,
            },
            "provenance": {
                "definition": {
                    "source": "adult",
                    "label": "income_gt_50k",
                    "positive_label": None,
                    "sensitive": ["race", "sex"],
                },
                "data_source": {
                    "kind": "dataset",
                    "name": "adult",
                    "sha256": {
                        "uci-adult/adult.data": "d" * 64,
                        "uci-adult/adult.test": "e" * 64,
                    },
                },
                "code_version": {"fairpca": "0.1.0", "git_commit": "0123abc"},
            },
            "selection": {
                "chosen": {
                    "variant": "fair_pca",
                    "classifier": "logreg",
                    "lambda": 0.125,
                    "name": "fair_pca/logreg@lambda=0.125",
                    "k": 10,
                },
                "gate": "upper_bound",
                "decision": {
                    "promote": True,
                    "reasons": ["upper bound of DP 0.0400 <= 0.05", "beats majority | by 0.06"],
                },
                "validation": _metrics(0.83, 0.02, 0.05),
                "test": _metrics(0.8215, 0.0231, 0.0612),
                "baselines": {
                    "majority": {
                        "class": 0,
                        "validation": {"accuracy": 0.7608},
                        "test": {"accuracy": 0.7611, "dp_difference": 0.0},
                    },
                    "pca": {
                        "name": "pca/logreg@lambda=0",
                        "validation": _metrics(0.85, 0.18, 0.1),
                        "test": _metrics(0.8478, 0.1812, 0.0954),
                    },
                },
                "split": {"n_train": 5000, "n_validation": 2500, "n_test": 2500},
                "group_sizes": {
                    "sex": {"Female": 1650, "Male": 3350},
                    "race": {"White": 4270, "Black": 480, "Other": "suppressed", "Eskimo": 12},
                },
                "test_group_sizes": {
                    "sex": {"Female": 1650},
                    "race": {},
                },
                "chosen_by": "the 2500 validation rows",
                "diagnostics": {},
                "warnings": ["fair_pca: a sensitive attribute is still predictable"],
            },
            "policy": {
                "name": "thresholds",
                "thresholds": {"max_dp_difference": 0.05},
                "description": "DP difference <= 0.05",
            },
            "eligibility": {"rules": {"min_accuracy_gain": 0.01}, "chosen_passes": True},
            "references": [],
            "k": {"fitted": 10, "note": "k=10 as given", "grid": [10], "largest": 63},
            "split_sizes": {"train": 5000, "validation": 2500, "test": 2500},
            "candidates": [],
            "model_sha256": "f" * 64,
            "model_digest": "9" * 64,
            "training_data_sha256": "8" * 64,
            "certification": {
                "certified": True,
                "reasons": [],
                "chosen_by": "the 2500 validation rows",
            },
        }
    )


def _metrics(accuracy: float, dp: float, eo: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value, half in (
        ("accuracy", accuracy, 0.01),
        ("dp_difference", dp, 0.02),
        ("eo_difference", eo, 0.03),
        ("dp_difference.sex", dp, 0.02),
        ("dp_difference.race", dp / 2, 0.02),
        ("dp_difference.intersection", dp * 2, 0.04),
    ):
        out.update(
            {name: value, f"{name}.ci95_low": value - half, f"{name}.ci95_high": value + half}
        )
    return out


# Unicode bidirectional controls (issue 53): names that would read reversed if shown raw.
CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
GROUP = "A\u202e1 puorG"  # reads "AGroup 1" where the control is shown raw
ATTRIBUTE = "se\u2067x"
SOURCE = "loans\u200f\u061c"


def with_bidi_names(record):
    """``record`` whose sensitive attribute, group, data set and screened column names hold
    bidirectional controls."""
    from fairpca.tasks.record import ScreenedColumn

    record = replaced(record, "provenance.definition", source=SOURCE, sensitive=[ATTRIBUTE])
    rates = {f"{rate}.{ATTRIBUTE}:{group}": value for group in (GROUP, "B")
             for rate, value in (("selection_rate", 0.2), ("tpr", 0.6), ("fpr", 0.1))}  # fmt: skip
    test = {**record.selection.test, **rates, f"dp_difference.{ATTRIBUTE}": 0.01}
    sizes = {ATTRIBUTE: {GROUP: 1650, "B": 3350}}
    record = replaced(
        record, "selection", group_sizes=sizes, test_group_sizes=sizes, test=test,
        warnings=[f"group {GROUP} is small"],
    )  # fmt: skip
    screened = [ScreenedColumn(column=f"id{CONTROLS}", rule="identifier", action="excluded")]
    return replaced(record, sensitive=[ATTRIBUTE], screening=screened)
