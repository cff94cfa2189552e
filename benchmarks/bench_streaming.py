"""Streaming fair PCA at CelebA scale, beside the cost of X^T X alone; in-memory fit vs sklearn.

Usage::

    python -m benchmarks.bench_streaming                       # CelebA scale: 202,599 x 6,400
    python -m benchmarks.bench_streaming --n 50000 --repeats 2 # smaller, repeated
    python -m benchmarks.bench_streaming --in-memory-only      # n = 200,000, d = 500 part only

Part 1 writes image-like synthetic data (80 x 80 "faces": a smooth low-rank model plus pixel
noise, float32, with a binary attribute that shifts the mean) as a ``.npy`` file, warms the
page cache, then runs each measurement in a fresh subprocess (so peak RSS is its own):

- ``floor32`` (the compute floor): ``np.load(path, mmap_mode="r")`` then ``X.T @ X``, what
  numpy needs just to form X^T X of the float32 file;
- ``floor64``: X^T X of the file in float64 (chunk by chunk, scipy ``dsyrk``), what a fit
  that multiplies in float64 could not beat;
- ``stream auto``: ``FairPCA(k).fit_chunks(path, sensitive_features=attr.npy)``;
- ``stream exact``: the same with ``svd_solver="covariance_eigh"``.

Peak RSS is the subprocess's ``VmHWM``; "beyond start" subtracts its RSS after imports.
The streamed fit maps the file and releases each processed chunk's pages, so its RSS holds
about one chunk of the file (the numpy floor keeps every page of the file it mapped).
Each repeat ends with the ratios of the streamed fits to both floors.

Part 2 times the in-memory ``FairPCA(k).fit`` at n = 200,000, d = 500 beside scikit-learn's
``PCA(k).fit`` and ``IncrementalPCA(k).fit`` on the same array (median of ``--repeats``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SIDE = 80


def rss_mib() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib() -> float:
    """Peak RSS of this process image (``VmHWM``; ``ru_maxrss`` would include the parent's
    RSS at fork time, which Linux carries across ``exec``)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# ---------------------------------------------------------------------- data
def smooth_basis(rank: int, rng: np.random.Generator) -> np.ndarray:
    """``rank`` smooth 80x80 patterns (random low-frequency cosine mixtures), unit norm."""
    grid = np.arange(SIDE) + 0.5
    freqs = [(a, b) for a in range(8) for b in range(8)]
    waves = np.stack(
        [np.outer(np.cos(np.pi * a * grid / SIDE), np.cos(np.pi * b * grid / SIDE)).ravel()
         for a, b in freqs]
    )  # fmt: skip
    mix = rng.normal(size=(rank, len(freqs))) / (1 + np.hypot(*np.array(freqs).T))[None, :]
    basis = mix @ waves
    return basis / np.linalg.norm(basis, axis=1, keepdims=True)


def write_data(folder: Path, n: int, d: int, seed: int = 0, rank: int = 60) -> tuple[Path, Path]:
    """Write ``X.npy`` (n x d float32) and ``attr.npy`` (n int8) chunk by chunk."""
    path, attr_path = folder / f"X_{n}x{d}.npy", folder / f"attr_{n}.npy"
    if path.exists() and attr_path.exists():
        return path, attr_path
    rng = np.random.default_rng(seed)
    if d != SIDE * SIDE:
        basis = rng.normal(size=(rank, d)) / np.sqrt(d)
        shift = rng.normal(size=d) / np.sqrt(d)
        mean = np.full(d, 0.5)
    else:
        basis = smooth_basis(rank, rng)
        shift = smooth_basis(1, rng)[0]
        yy, xx = np.mgrid[:SIDE, :SIDE] / SIDE
        mean = (0.6 - 0.4 * ((xx - 0.5) ** 2 + (yy - 0.45) ** 2)).ravel()  # a lit "face"
    scales = 30.0 / (1.0 + np.arange(rank)) ** 0.8
    attr = (rng.random(n) < 0.42).astype(np.int8)
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    step = 8192
    for start in range(0, n, step):
        stop = min(n, start + step)
        scores = rng.standard_normal((stop - start, rank), dtype=np.float32) * scales
        block = scores @ basis.astype(np.float32)
        block += rng.standard_normal(block.shape, dtype=np.float32) * np.float32(0.05)
        block += (mean + 3.0 * np.outer(attr[start:stop], shift)).astype(np.float32)
        X[start:stop] = block
    X.flush()
    del X
    np.save(attr_path, attr)
    return path, attr_path


def warm_page_cache(path: Path) -> float:
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as handle:
        buffer = bytearray(1 << 24)
        while handle.readinto(buffer):
            pass
    return time.perf_counter() - start


# ---------------------------------------------------------------------- measurements
def run_task(task: str, path: str, attr: str, k: int) -> dict:
    """One measurement (runs in its own subprocess)."""
    from scipy.linalg.blas import dsyrk

    from fairpca import FairPCA
    from fairpca._chunked import ArrayChunks

    start_rss = rss_mib()
    start = time.perf_counter()
    extra, model, solve_seconds = {}, None, []
    if task == "floor64":
        chunks = ArrayChunks(path)
        d = chunks.shape[1]
        upper = np.zeros((d, d), order="F")
        for block, _, _ in chunks:
            block64 = np.asarray(block, dtype=np.float64)
            upper = dsyrk(1.0, block64.T, beta=1.0, c=upper, trans=0, overwrite_c=True)
    elif task == "floor32":
        X = np.load(path, mmap_mode="r")
        gram = X.T @ X
        extra["gram_dtype"] = str(gram.dtype)
    elif task in ("stream_auto", "stream_exact"):
        solver = "auto" if task == "stream_auto" else "covariance_eigh"
        model = FairPCA(k, svd_solver=solver, random_state=0)
        solve = model._fit_from_statistics  # timed on its own: the solve from the statistics

        def timed_solve(stats):
            begin = time.perf_counter()
            solve(stats)
            solve_seconds.append(time.perf_counter() - begin)

        model._fit_from_statistics = timed_solve
        model.fit_chunks(path, sensitive_features=attr)
    else:
        raise ValueError(task)
    seconds = time.perf_counter() - start
    peak = peak_rss_mib()
    if model is not None:
        extra = {
            "solve_seconds": solve_seconds[0],
            "mean_gap": model.mean_gap_,
            "explained_variance_ratio_sum": float(model.explained_variance_ratio_.sum()),
        }
    return {
        "task": task,
        "seconds": seconds,
        "peak_rss_mib": peak,
        "start_rss_mib": start_rss,
        **extra,
    }


def measure(task: str, path: Path, attr: Path, k: int) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_streaming", "--worker", task]
    command += ["--path", str(path), "--attr", str(attr), "--k", str(k)]
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{task} failed:\n{out.stderr}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    solve = f"   (solve {result['solve_seconds']:.1f} s)" if "solve_seconds" in result else ""
    print(
        f"  {task:<13} {result['seconds']:8.1f} s   peak RSS {result['peak_rss_mib']:7.0f} MiB"
        f" (start {result['start_rss_mib']:.0f} MiB){solve}",
        flush=True,
    )
    return result


def streaming_part(args) -> list[dict]:
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    path, attr = write_data(folder, args.n, args.d)
    size_gb = path.stat().st_size / 1e9
    print(f"data: {path} ({size_gb:.2f} GB), written in {time.perf_counter() - start:.0f} s")
    print(f"page cache warm-up read: {warm_page_cache(path):.1f} s")
    tasks = ["floor64", "stream_auto"]
    if not args.skip_numpy_floor:
        tasks.insert(0, "floor32")
    if not args.skip_exact:
        tasks.append("stream_exact")
    results = []
    for repeat in range(args.repeats):
        print(f"repeat {repeat + 1}/{args.repeats}")
        seconds = {}
        for task in tasks:
            result = measure(task, path, attr, args.k)
            seconds[task] = result["seconds"]
            results.append(result)
        for fit in (t for t in ("stream_auto", "stream_exact") if t in seconds):
            ratios = ", ".join(
                f"{seconds[fit] / seconds[floor]:.2f}x {floor}"
                for floor in ("floor32", "floor64")
                if floor in seconds
            )
            print(f"  {fit}: {ratios}")
    return results


def in_memory_part(args) -> list[dict]:
    from sklearn.decomposition import PCA, IncrementalPCA

    from fairpca import FairPCA

    rng = np.random.default_rng(1)
    n, d, k = 200_000, 500, args.k_in_memory
    X = rng.standard_normal((n, 50)) @ rng.standard_normal((50, d))
    X += rng.standard_normal((n, d))
    z = rng.integers(0, 2, n)
    X += np.outer(z, rng.standard_normal(d))
    fits = {
        "FairPCA.fit": lambda: FairPCA(k).fit(X, sensitive_features=z),
        "FairPCA.fit_chunks": lambda: FairPCA(k).fit_chunks(X, sensitive_features=z),
        "PCA.fit": lambda: PCA(k).fit(X),
        "IncrementalPCA.fit": lambda: IncrementalPCA(k).fit(X),
    }
    if not hasattr(FairPCA, "fit_chunks"):  # an older fairpca, for before/after comparisons
        del fits["FairPCA.fit_chunks"]
    times = {name: [] for name in fits}
    for _ in range(args.repeats_in_memory):
        for name, fit in fits.items():
            start = time.perf_counter()
            fit()
            times[name].append(time.perf_counter() - start)
    rows = [{"fit": name, "seconds": float(np.median(t)), "all": t} for name, t in times.items()]
    print(f"in memory: n={n}, d={d}, k={k}, float64 (median of {args.repeats_in_memory})")
    base = rows[0]["seconds"]
    for row in rows:
        print(f"  {row['fit']:<20} {row['seconds']:7.2f} s   FairPCA.fit / this = "
              f"{base / row['seconds']:.2f}")  # fmt: skip
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=202_599)
    parser.add_argument("--d", type=int, default=SIDE * SIDE)
    parser.add_argument("--k", type=int, default=400)
    parser.add_argument("--dir", default="/tmp/fairpca_bench")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip-exact", action="store_true")
    parser.add_argument("--skip-numpy-floor", action="store_true")
    parser.add_argument("--in-memory-only", action="store_true")
    parser.add_argument("--skip-in-memory", action="store_true")
    parser.add_argument("--k-in-memory", type=int, default=50)
    parser.add_argument("--repeats-in-memory", type=int, default=3)
    parser.add_argument("--json", help="write all results to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--attr", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(run_task(args.worker, args.path, args.attr, args.k)))
        return
    print(f"cpus: {os.cpu_count()}, load average: {os.getloadavg()}")
    results = {"args": vars(args)}
    if not args.in_memory_only:
        results["streaming"] = streaming_part(args)
    if not args.skip_in_memory:
        results["in_memory"] = in_memory_part(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
