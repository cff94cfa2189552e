"""Screenshots of an audit for the README ("Reading an audit"): ``report.html`` and the
registered model version's page in the MLflow UI, taken with headless Chromium.

Run from the repository root (needs ``chromium`` and the ``audit`` extra)::

    .venv/bin/python scripts/screenshots.py            # runs `fairpca audit --dataset adult`
    .venv/bin/python scripts/screenshots.py --out docs/img --work /tmp/shots

It runs the default audit in ``--work`` (default: a temporary folder; an audit already there
is reused), starts ``mlflow ui`` on a free port of
127.0.0.1, writes ``report.png`` and ``mlflow-version.png`` (palette PNGs, small), and stops
the server. Nothing outside the temporary folder and ``--out`` is written.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
)  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_audit(work: Path) -> dict:
    """The default audit of the README's quick start, recorded in ``work/mlflow.db``."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "COLUMNS": "120"}
    fairpca = Path(sys.executable).parent / "fairpca"
    command = [str(fairpca), "audit", "--dataset", "adult"]
    if not (work / "mlflow.db").exists():
        subprocess.run(command, cwd=work, env=env, check=True, stdout=subprocess.DEVNULL)
    (out_dir,) = (work / "fairpca-output").iterdir()
    audit = json.loads((out_dir / "audit.json").read_text())
    status = json.loads((out_dir / "mlflow_status.json").read_text())
    return {"report": out_dir / "report.html", "model": audit["model_name"], **status}


def start_mlflow_ui(store: str, port: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", store,
               "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return server
        except OSError:
            time.sleep(1)
    server.terminate()
    raise RuntimeError(f"mlflow ui did not answer on port {port} within 300 s")


def screenshot(url: str, path: Path, size: tuple[int, int], profile: Path) -> Path:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed: apt-get install -y chromium")
    command = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
               f"--window-size={size[0]},{size[1]}", "--virtual-time-budget=15000",
               f"--screenshot={path}", url]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=180)
    return path


def shrink(path: Path) -> None:
    """Palette PNG (256 colours): a fraction of the size, still crisp for text."""
    from PIL import Image

    Image.open(path).convert("RGB").quantize(colors=256).save(path, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    parser.add_argument("--work", type=Path, default=None, help="folder of the audit")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fairpca-shots-") as tmp:
        work = (args.work or Path(tmp)).absolute()
        work.mkdir(parents=True, exist_ok=True)
        audit = run_audit(work)
        shots = [(audit["report"].as_uri(), "report.png", (1280, 1500))]
        port = free_port()
        server = start_mlflow_ui(f"sqlite:///{work / 'mlflow.db'}", port)
        try:
            version = audit.get("model_version") or "1"
            page = f"http://127.0.0.1:{port}/#/models/{audit['model']}/versions/{version}"
            shots.append((page, "mlflow-version.png", (1280, 1100)))
            for url, name, size in shots:
                shrink(screenshot(url, args.out / name, size, work / "profile"))
                print(args.out / name)
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
