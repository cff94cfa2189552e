"""Screenshots of an audit for the README ("Reading an audit"), taken with headless Chromium
at 1280x900 from a real default audit: the report's first screen, and in the MLflow UI the
run list (the verdict columns' view), the run page and the registered version's page.

Run from the repository root (needs ``chromium`` and the ``audit`` extra)::

    .venv/bin/python scripts/screenshots.py            # runs `fairpca audit --dataset adult`
    .venv/bin/python scripts/screenshots.py --out docs/img --work /tmp/shots

It runs the default audit of the README's quick start in ``--work`` (default: a temporary
folder; an audit already there is reused), starts ``mlflow ui`` on a free port of
127.0.0.1, writes ``report.png``, ``mlflow-run-list.png``, ``mlflow-run.png`` and
``mlflow-version.png`` (palette PNGs, small) into ``--out``, and stops the server and the
browser. MLflow's assistant panel, which opens by itself on a first visit, is closed first.
Nothing outside ``--work`` and ``--out`` is written.
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

SIZE = (1280, 900)
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run", "--hide-scrollbars",
)  # fmt: skip
# Clicks the close button of MLflow's assistant panel (it opens by itself on a first visit).
CLOSE_ASSISTANT = """(() => {
  for (const button of document.querySelectorAll('button[aria-label=Close]')) {
    for (let up = button.parentElement, i = 0; up && i < 4; up = up.parentElement, i++) {
      if (up.innerText.includes('MLflow Assistant')) { button.click(); return true; }
    }
  }
  return false;
})()"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_audit(work: Path) -> dict:
    """The default audit of the README's quick start, recorded in ``work/mlflow.db``; what
    the pages show (the report, the experiment, run, model and version)."""
    env = {**os.environ, "COLUMNS": "120"}
    fairpca = Path(sys.executable).parent / "fairpca"
    if not (work / "mlflow.db").exists():
        command = [str(fairpca), "audit", "--dataset", "adult"]
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


class Browser:
    """One headless Chromium page driven over the DevTools protocol, its viewport exactly
    ``size`` (a window's size includes toolbars)."""

    def __init__(self, size: tuple[int, int], profile: Path) -> None:
        from websockets.sync.client import connect

        port = free_port()
        self.process = subprocess.Popen(
            [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
             f"--window-size={size[0]},{size[1]}", f"--remote-debugging-port={port}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.page = connect(_page_target(port), max_size=2**26, open_timeout=60)
        self.calls = 0
        width, height = size
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)  # fmt: skip

    def call(self, method: str, **params):
        self.calls += 1
        self.page.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            answer = json.loads(self.page.recv(timeout=120))
            if answer.get("id") == self.calls:
                return answer.get("result", {})

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def open(self, url: str, text: str) -> None:
        """Load ``url`` and wait until the page shows ``text`` (its data arrived)."""
        self.call("Page.navigate", url=url)
        probe = f"document.body && document.body.innerText.includes({json.dumps(text)})"
        deadline = time.monotonic() + 240
        while not self.evaluate(probe):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not show {text!r} within 240 s")
            time.sleep(1)
        time.sleep(3)  # the rest of the page's requests

    def capture(self, path: Path) -> Path:
        shot = self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        shrink(path)
        return path

    def close(self) -> None:
        self.page.close()
        self.process.terminate()
        self.process.wait(timeout=30)


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


def mlflow_pages(audit: dict, ui: str) -> list[tuple[str, str, str]]:
    """(file name, address, text that shows the page is loaded) of the MLflow UI pages."""
    from fairpca.tasks.mlflow_logging import run_list_url

    experiment = _experiment_of(audit)
    version = audit.get("model_version") or "1"
    return [
        ("mlflow-run-list.png", run_list_url(ui, experiment), "Description"),
        ("mlflow-run.png", f"{ui}/#/experiments/{experiment}/runs/{audit['run_id']}",
         "Description"),
        ("mlflow-version.png", f"{ui}/#/models/{audit['model']}/versions/{version}",
         f"Version {version}"),
    ]  # fmt: skip


def _experiment_of(audit: dict) -> str:
    from mlflow import MlflowClient

    client = MlflowClient(audit["tracking_uri"])
    return client.get_run(audit["run_id"]).info.experiment_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    parser.add_argument("--work", type=Path, default=None, help="folder of the audit")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fairpca-shots-") as tmp:
        work = (args.work or Path(tmp)).absolute()
        work.mkdir(parents=True, exist_ok=True)
        audit = run_audit(work) | {"tracking_uri": f"sqlite:///{work / 'mlflow.db'}"}
        port = free_port()
        server = start_mlflow_ui(audit["tracking_uri"], port)
        browser = Browser(SIZE, Path(tmp) / "profile")
        try:
            browser.open(audit["report"].as_uri(), "Chosen model")
            print(browser.capture(args.out / "report.png"))
            pages = mlflow_pages(audit, f"http://127.0.0.1:{port}")
            for index, (name, url, text) in enumerate(pages):
                browser.open(url, text)
                if index == 0 and browser.evaluate(CLOSE_ASSISTANT):
                    time.sleep(2)
                print(browser.capture(args.out / name))
        finally:
            browser.close()
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
