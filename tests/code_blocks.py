"""Run the code blocks of a documentation page as written (used by test_readme_examples.py
and test_docs_examples.py).

A page's blocks run in document order in an empty folder, each as a reader who pastes it
alone would run it: each ``python`` block in a fresh Python process (so it must import and
define every name it uses; what an earlier block wrote to the folder, an audit's output or
``mlflow.db``, is still there); each ``bash`` block in ``bash -e -o pipefail``; a block of
any language whose reStructuredText ``:caption:`` is a file name (``my-audit.yaml``) is
written to that file, for the blocks after it to use. Other blocks (output, YAML without a
caption, ...) are shown to the reader only. :func:`undefined_names` checks the first rule
without running anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

RUNNABLE = ("python", "bash")
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
_DIRECTIVE = re.compile(
    r"^(?P<indent>[ \t]*)\.\. (?:code-block|code|sourcecode)::[ \t]*(?P<lang>\S*)[ \t]*$"
)
_OPTION = re.compile(r"^:(?P<name>[\w-]+):[ \t]*(?P<value>.*)$")
_FILE_NAME = re.compile(r"^[\w./-]+\.\w+$")


@dataclass(frozen=True)
class Block:
    """One code block: ``kind`` is ``python``, ``bash`` or ``file`` (written to ``path``);
    ``line`` is its first line in the page (1-based)."""

    kind: str
    code: str
    line: int
    language: str
    path: str | None = None


def markdown_blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown page (every language, in order), also those indented
    inside a list item (their indentation removed)."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        i += 1
        if not opening:
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        language = opening["lang"].lower()
        body, start = [], i + 1
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i][indent:] if not lines[i][:indent].strip() else lines[i].lstrip())
            i += 1
        i += 1
        blocks.append(Block(language, "\n".join(body) + "\n", start, language))
    return blocks


def rst_blocks(text: str) -> list[Block]:
    """The ``code-block`` directives of a reStructuredText page (every language, in order);
    a ``:caption:`` that is a file name makes the block a file to write."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        directive = _DIRECTIVE.match(lines[i])
        i += 1
        if not directive:
            continue
        indent = len(directive["indent"].expandtabs())
        language = directive["lang"].lower()
        options = {}
        while i < len(lines) and (option := _OPTION.match(lines[i].strip())):
            options[option["name"]] = option["value"].strip()
            i += 1
        body, start = [], i + 1
        while i < len(lines):
            line = lines[i]
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                break
            body.append(line)
            i += 1
        while body and not body[0].strip():
            body.pop(0)
            start += 1
        while body and not body[-1].strip():
            body.pop()
        width = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
        code = "\n".join(b[width:] for b in body) + "\n"
        caption = options.get("caption", "")
        if _FILE_NAME.match(caption):
            blocks.append(Block("file", code, start, language, caption))
        else:
            blocks.append(Block(language, code, start, language))
    return blocks


def page_blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    return markdown_blocks(text) if path.suffix == ".md" else rst_blocks(text)


def skipped(blocks: list[Block], exceptions: dict[str, str]) -> set[int]:
    """Indices of the runnable blocks that an exception names (by a piece of their code);
    every exception must name exactly one block, so none goes stale or hides others."""
    chosen = set()
    for piece in exceptions:
        hits = [i for i, b in enumerate(blocks) if b.kind in RUNNABLE and piece in b.code]
        if len(hits) != 1:
            raise AssertionError(
                f"exception {piece!r} matches {len(hits)} runnable block(s), not one: update "
                "the exceptions to the page"
            )
        chosen |= set(hits)
    return chosen


def script(blocks: list[Block], skip: set[int], page: str) -> str:
    """One Python script that runs the blocks in order (see the module docstring)."""
    parts = [
        "import subprocess as _docs_subprocess\n"
        "import sys as _docs_sys\n"
        "import time as _docs_time\n"
        "from pathlib import Path as _DocsPath\n"
        "_docs_start = _docs_time.monotonic()\n"
        "def _docs_mark(where):\n"
        "    print(f'## {where} at {_docs_time.monotonic() - _docs_start:.1f} s', flush=True)\n"
        "def _docs_bash(code, where):\n"
        "    _docs_mark(where)\n"
        "    done = _docs_subprocess.run(['bash', '-e', '-o', 'pipefail', '-c', code])\n"
        "    if done.returncode:\n"
        "        raise SystemExit(f'the bash block at {where} exited with {done.returncode}')\n"
        "def _docs_python(code, where):\n"
        "    _docs_mark(where)\n"
        "    name = where.replace('/', '_').replace(':', '_') + '.py'\n"
        "    path = _DocsPath('.docs_blocks') / name\n"
        "    path.parent.mkdir(exist_ok=True)\n"
        "    path.write_text(code)\n"
        "    done = _docs_subprocess.run([_docs_sys.executable, str(path)])\n"
        "    if done.returncode:\n"
        "        raise SystemExit(\n"
        "            f'the python block at {where}, run alone, exited with {done.returncode}'\n"
        "        )\n"
        "def _docs_file(path, text):\n"
        "    _DocsPath(path).parent.mkdir(parents=True, exist_ok=True)\n"
        "    _DocsPath(path).write_text(text)\n"
    ]
    for index, block in enumerate(blocks):
        where = f"{page}:{block.line}"
        if index in skip:
            continue
        if block.kind == "python":
            parts.append(f"_docs_python({block.code!r}, {where!r})\n")
        elif block.kind == "bash":
            parts.append(f"_docs_bash({block.code!r}, {where!r})\n")
        elif block.kind == "file":
            parts.append(f"_docs_file({block.path!r}, {block.code!r})\n")
    return "\n".join(parts)


def environment(cwd: Path, *, activated: bool) -> dict[str, str]:
    """A new user's environment in ``cwd``: no MLflow or Prefect server configured (the
    commands start what they need), Prefect's home inside ``cwd``; ``activated``: the
    virtual environment's ``bin`` first on ``PATH``, as after ``. .venv/bin/activate``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("MLFLOW_") and key not in {"PREFECT_API_URL", "VIRTUAL_ENV"}
    }
    bin_dir = str(Path(sys.executable).parent)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir]
    if activated:
        path.insert(0, bin_dir)
        env["VIRTUAL_ENV"] = sys.prefix
    env["PATH"] = os.pathsep.join(path)
    env.update(
        PREFECT_HOME=str(cwd / ".prefect-home"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="90",
        DO_NOT_TRACK="1",
        MLFLOW_DISABLE_TELEMETRY="true",
        MPLBACKEND="Agg",
        COLUMNS="100",
        PYTHONUNBUFFERED="1",
    )
    return env


def run_page(path: Path, cwd: Path, exceptions: dict[str, str], *, activated: bool,
             env: dict[str, str] | None = None,
             timeout: float = 1200) -> subprocess.CompletedProcess:  # fmt: skip
    """Run the runnable blocks of ``path`` as written in the empty folder ``cwd``, where
    ``.venv`` is this virtual environment (as in a checkout after the quick start); ``env``
    adds to the new user's environment."""
    blocks = page_blocks(path)
    skip = skipped(blocks, exceptions)
    (cwd / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    runner = cwd / ".docs_page.py"
    runner.write_text(script(blocks, skip, path.name))
    process = subprocess.Popen(
        [sys.executable, runner.name], cwd=cwd,
        env={**environment(cwd, activated=activated), **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = "", f"the page's blocks ran past {timeout} s"
    finally:  # whatever a block started (a server, a cluster) ends with the page
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def undefined_names(blocks: dict[str, str], folder: Path) -> list[str]:
    """``"<where>: <message>"`` for each name a block uses without importing or defining it
    (ruff's F821 on each block as its own file in ``folder``; a syntax error is reported
    too): ``blocks`` maps where each block is (``page:line``) to its code."""
    from ruff.__main__ import find_ruff_bin

    where = {}
    for number, (place, code) in enumerate(blocks.items()):
        (folder / f"block_{number}.py").write_text(code)
        where[f"block_{number}.py"] = place
    done = subprocess.run(
        [find_ruff_bin(), "check", "--isolated", "--no-cache", "--select", "F821",
         "--output-format", "json", "--exit-zero", str(folder)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [
        f"{where[Path(finding['filename']).name]} (+{finding['location']['row'] - 1} lines): "
        f"{finding['message']}"
        for finding in json.loads(done.stdout)
    ]
