"""The default fairness audit at growing table sizes: wall time by stage, peak RSS, the cost
per row and the growth from one size to the next.

Usage::

    python -m benchmarks.bench_audit                          # 10,000 to 200,000 rows
    python -m benchmarks.bench_audit --sizes 20000 200000     # chosen sizes
    python -m benchmarks.bench_audit --sizes 1000000 --append # add a size to the results

48,842 rows is ``fairpca audit --dataset adult`` itself (every Adult row). Every other size
is an Adult-like table written as a CSV file and audited as a user's file (``--data``): Adult's
rows drawn with replacement (seeded), each numeric column moved by Gaussian noise of 5% of
its standard deviation (rounded where the column holds whole numbers), so no two drawn rows
are copies. Each audit runs as its own ``fairpca audit`` command (a temporary Prefect server,
a local SQLite MLflow store), under ``nice``; its peak RSS is the largest of the command's
processes (``getrusage`` of the waited children), its stages are the ``time_*_s`` of its
``audit.json``. The machine's load average before and after each run is kept: the machine is
shared, so seconds measured under load are upper bounds.

Results: ``benchmarks/results/bench_audit.csv`` (one row per size) and ``bench_audit.md``.

The Dask route (``--dask``; default sizes 1,000,000 and 5,000,000)::

    python -m benchmarks.bench_audit --dask --sizes 1000000 5000000

writes each size's Adult-like table as Parquet parts of :data:`PART_ROWS` rows (generated
part by part), starts ``dask scheduler`` and ``dask worker`` (two single-threaded worker
processes of :data:`WORKER_MEMORY` each) on 127.0.0.1 and runs ``fairpca audit --data PARTS
--dask-address tcp://127.0.0.1:PORT``; it keeps the wall time, the command's peak RSS and
each worker's peak RSS (``getrusage`` inside the worker processes), in
``bench_audit_dask.csv`` / ``.md``. 5,000,000 rows take tens of minutes on the shared 2-core
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"
ADULT_ROWS = 48_842
PARTS = ("train", "validation", "test")
DERIVED = ("_growth", "_per_row")
STAGES = (
    "load_data", "encode", "search_k", "lambda_sweep", "choose", "diagnostics",
    "evaluate_test", "wait_references", "save_model",
)  # fmt: skip


def adult_like(n_rows: int, seed: int) -> pd.DataFrame:
    """``n_rows`` Adult-like rows: Adult's rows drawn with replacement, numeric columns
    moved by 5% of their standard deviation (see the module docstring)."""
    from fairpca import datasets

    adult = datasets.load_dataset("adult").with_named_groups()
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, adult.n_samples, n_rows)
    table = adult.X.iloc[rows].reset_index(drop=True)
    for column in table.select_dtypes("number"):
        values = table[column].to_numpy(dtype=float)
        moved = values + rng.normal(0.0, 0.05 * values.std(), n_rows)
        whole = np.all(np.mod(values, 1) == 0)
        table[column] = np.clip(np.round(moved) if whole else moved, values.min(), None)
    table["sex"] = adult.sensitive["sex"].to_numpy()[rows]
    table["income"] = np.where(np.asarray(adult.y)[rows] == 1, ">50K", "<=50K")
    return table


def audit_command(n_rows: int, work: Path, seed: int) -> list[str]:
    """The ``fairpca audit`` command of one size (writing its table first)."""
    fairpca = str(Path(sys.executable).with_name("fairpca"))
    common = ["--output-dir", str(work / "out"), "--run-name", "bench"]
    if n_rows == ADULT_ROWS:
        return [fairpca, "audit", "--dataset", "adult", *common]
    path = work / f"adult_like_{n_rows}.csv"
    adult_like(n_rows, seed).to_csv(path, index=False)
    source = ["--data", str(path), "--label", "income", "--positive-label", ">50K"]
    return [fairpca, "audit", *source, "--sensitive", "sex", *common]


def run_size(n_rows: int, seed: int) -> dict:
    """One audit of ``n_rows`` rows in a fresh process: its measurements."""
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as folder:
        work = Path(folder)
        command = audit_command(n_rows, work, seed)
        env = {
            **os.environ,
            "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}",
            "XDG_CONFIG_HOME": str(work / "config"),
        }
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        done = subprocess.run(
            ["nice", "-n", "10", *command], env=env, capture_output=True, text=True, check=False
        )
        wall = time.perf_counter() - start
        peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if done.returncode != 0:
            raise RuntimeError(f"{n_rows} rows: exit {done.returncode}\n{done.stderr[-3000:]}")
        record = json.loads((work / "out" / "bench" / "audit.json").read_text())
    metrics, selection = record["metrics"], record["selection"]
    test = selection["test"]
    row = {
        "rows": n_rows,
        **{f"n_{part}": selection["split"][f"n_{part}"] for part in PARTS},
        "wall_s": round(wall, 1),
        "flow_s": round(metrics["time_total_s"], 1),
        **{f"{stage}_s": round(metrics.get(f"time_{stage}_s", np.nan), 1) for stage in STAGES},
        "references_task_s": round(metrics.get("time_reference_mitigations_task_s", np.nan), 1),
        "peak_rss_mb": round(peak_kb / 1024),
        "chosen": selection["chosen"]["name"],
        "test_balanced_accuracy": round(test.get("balanced_accuracy", np.nan), 4),
        "test_dp_difference": round(test.get("dp_difference", np.nan), 4),
        "test_selection_rate_ratio": round(test.get("selection_rate_ratio", np.nan), 4),
        "promoted": bool(record["decision"]["promote"]),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(row), flush=True)
    return row


PART_ROWS = 250_000  # rows per Parquet part of the Dask route's tables
WORKER_MEMORY = "2GiB"  # each Dask worker's memory limit


def write_parts(n_rows: int, folder: Path, seed: int) -> None:
    """An Adult-like table of ``n_rows`` rows as Parquet parts, one part in memory at a
    time."""
    folder.mkdir(parents=True)
    for index, start in enumerate(range(0, n_rows, PART_ROWS)):
        rows = min(PART_ROWS, n_rows - start)
        adult_like(rows, seed * 1_000_003 + index).to_parquet(
            folder / f"part-{index:04d}.parquet", index=False
        )


def _worker_peak_mb() -> float:
    """This process's peak RSS in MB (run inside each worker by ``client.run``)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _start_cluster(work: Path) -> tuple[str, list]:
    """``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1, each in its own
    process group; returns the scheduler's address and the processes."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address, python = f"tcp://127.0.0.1:{port}", [sys.executable, "-m"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL,
             "start_new_session": True}  # fmt: skip
    scheduler = subprocess.Popen(
        [*python, "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port),
         "--no-dashboard"], **quiet,
    )  # fmt: skip
    workers = subprocess.Popen(
        [*python, "distributed.cli.dask_worker", address, "--host", "127.0.0.1", "--nworkers",
         "2", "--nthreads", "1", "--memory-limit", WORKER_MEMORY, "--no-dashboard",
         "--local-directory", str(work / "workers")], **quiet,
    )  # fmt: skip
    return address, [workers, scheduler]


def run_dask_size(n_rows: int, seed: int) -> dict:
    """One Dask-route audit of ``n_rows`` rows as Parquet parts on a fresh 2-worker
    cluster: its measurements."""
    import signal

    from distributed import Client

    with tempfile.TemporaryDirectory(prefix="bench-audit-dask-") as folder:
        work = Path(folder)
        write_parts(n_rows, work / "parts", seed)
        address, processes = _start_cluster(work)
        try:
            with Client(address, timeout=60) as client:
                client.wait_for_workers(2, timeout=120)
                command = [
                    str(Path(sys.executable).with_name("fairpca")), "audit",
                    "--data", str(work / "parts"), "--label", "income", "--positive-label",
                    ">50K", "--sensitive", "sex", "--dask-address", address,
                    "--output-dir", str(work / "out"), "--run-name", "bench",
                ]  # fmt: skip
                env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
                load_before, start = os.getloadavg()[0], time.perf_counter()
                done = subprocess.run(command, env=env, capture_output=True, text=True)
                wall = time.perf_counter() - start
                peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
                workers_mb = sorted(client.run(_worker_peak_mb).values())
        finally:
            for process in processes:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"{n_rows} rows: exit {done.returncode}\n{done.stderr[-3000:]}")
        record = json.loads((work / "out" / "bench" / "audit.json").read_text())
    selection = record["selection"]
    row = {
        "rows": n_rows,
        **{f"n_{part}": selection["split"][f"n_{part}"] for part in PARTS},
        "wall_s": round(wall, 1),
        "command_peak_rss_mb": round(peak_kb / 1024),
        **{f"worker{i}_peak_rss_mb": round(mb) for i, mb in enumerate(workers_mb)},
        "worker_memory_limit": WORKER_MEMORY,
        "chosen": selection["chosen"]["name"],
        "test_balanced_accuracy": round(selection["test"].get("balanced_accuracy", np.nan), 4),
        "promoted": bool(record["decision"]["promote"]),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(row), flush=True)
    return row


def with_growth(table: pd.DataFrame) -> pd.DataFrame:
    """Cost per 1,000 rows, and each size's wall time and rows over the previous size's."""
    table = table.sort_values("rows").reset_index(drop=True)
    table["wall_ms_per_row"] = (1000 * table["wall_s"] / table["rows"]).round(3)
    table["rows_growth"] = (table["rows"] / table["rows"].shift()).round(2)
    table["wall_growth"] = (table["wall_s"] / table["wall_s"].shift()).round(2)
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sizes = [10_000, 20_000, ADULT_ROWS, 200_000]
    parser.add_argument("--sizes", type=int, nargs="+", default=sizes)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--append", action="store_true", help="keep the other sizes' rows")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--dask", action="store_true", help="the Dask route, Parquet parts")
    args = parser.parse_args(argv)
    if args.dask:
        return dask_main(args, argv)
    rows = [run_size(n, args.seed) for n in args.sizes]
    csv = args.out / "bench_audit.csv"
    table = pd.DataFrame(rows)
    if args.append and csv.exists():
        kept = pd.read_csv(csv)
        table = pd.concat([kept[~kept["rows"].isin(args.sizes)], table], ignore_index=True)
    table = with_growth(table[[c for c in table.columns if not c.endswith(DERIVED)]])
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(csv, index=False)
    (args.out / "bench_audit.md").write_text(
        "# The default audit by table size\n\n"
        "`python -m benchmarks.bench_audit` (see its docstring). Seconds on the shared 2-core "
        "machine under the load shown (1-minute load average before and after the run).\n\n"
        + markdown_table(table)
    )


def dask_main(args, argv: list[str] | None) -> None:
    """The Dask route's sizes (1,000,000 and 5,000,000 rows unless ``--sizes``)."""
    sizes = args.sizes if "--sizes" in (argv or sys.argv) else [1_000_000, 5_000_000]
    table = pd.DataFrame([run_dask_size(n, args.seed) for n in sizes])
    csv = args.out / "bench_audit_dask.csv"
    if args.append and csv.exists():
        kept = pd.read_csv(csv)
        table = pd.concat([kept[~kept["rows"].isin(sizes)], table], ignore_index=True)
    args.out.mkdir(parents=True, exist_ok=True)
    table.sort_values("rows").to_csv(csv, index=False)
    (args.out / "bench_audit_dask.md").write_text(
        "# The Dask route by table size\n\n`python -m benchmarks.bench_audit --dask` (see its "
        f"docstring): Parquet parts of {PART_ROWS:,} rows, two single-threaded workers of "
        f"{WORKER_MEMORY} each on the shared 2-core machine.\n\n"
        + markdown_table(table.sort_values("rows"))
    )


def markdown_table(table: pd.DataFrame) -> str:
    """``table`` as a Markdown table (no optional dependency)."""
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * table.shape[1]]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(False)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
