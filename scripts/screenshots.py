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
import base64
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
               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]  # fmt: skip
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


def _chromium() -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed: apt-get install -y chromium")
    return chromium


def screenshot(url: str, path: Path, size: tuple[int, int], profile: Path) -> Path:
    """A static page (``report.html``): Chromium's own ``--screenshot``."""
    command = [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
               f"--window-size={size[0]},{size[1]}", "--virtual-time-budget=5000",
               f"--screenshot={path}", url]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=180)
    return path


def app_screenshot(url: str, path: Path, size: tuple[int, int], profile: Path, text: str) -> Path:
    """A single-page app (the MLflow UI): load ``url`` over the DevTools protocol, wait until
    the page shows ``text`` (its data arrived), then capture it."""
    from websockets.sync.client import connect

    port = free_port()
    browser = subprocess.Popen(
        [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
         f"--window-size={size[0]},{size[1]}", f"--remote-debugging-port={port}",
         "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        target = _page_target(port)
        with connect(target, max_size=2**26, open_timeout=60) as page:
            calls = iter(range(1, 10**6))

            def call(method: str, **params):
                number = next(calls)
                page.send(json.dumps({"id": number, "method": method, "params": params}))
                while True:
                    answer = json.loads(page.recv(timeout=120))
                    if answer.get("id") == number:
                        return answer.get("result", {})

            call("Page.navigate", url=url)
            probe = f"document.body && document.body.innerText.includes({json.dumps(text)})"
            deadline = time.monotonic() + 240
            while not call("Runtime.evaluate", expression=probe)["result"].get("value"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} did not show {text!r} within 240 s")
                time.sleep(1)
            time.sleep(3)  # the rest of the page's requests
            shot = call("Page.captureScreenshot", format="png")
            path.write_bytes(base64.b64decode(shot["data"]))
    finally:
        browser.terminate()
        browser.wait(timeout=30)
    return path


def _page_target(port: int) -> str:
    """The DevTools WebSocket address of the browser's page."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2) as answer:
                pages = [t for t in json.load(answer) if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError("chromium's DevTools endpoint did not answer within 120 s")


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
        profile = work / "profile"
        shrink(screenshot(audit["report"].as_uri(), args.out / "report.png", (1280, 1500),
                          profile))  # fmt: skip
        print(args.out / "report.png")
        port = free_port()
        server = start_mlflow_ui(f"sqlite:///{work / 'mlflow.db'}", port)
        try:
            version = audit.get("model_version") or "1"
            page = f"http://127.0.0.1:{port}/#/models/{audit['model']}/versions/{version}"
            shot = app_screenshot(page, args.out / "mlflow-version.png", (1280, 1100), profile,
                                  text=f"Version {version}")  # fmt: skip
            shrink(shot)
            print(shot)
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
