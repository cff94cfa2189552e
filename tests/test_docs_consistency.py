"""The documentation agrees with the code and with itself: the deployments it names are those
of ``deployments/prefect.yaml`` (and it counts them right), the key and policy files carry the
names the code uses, and every cross-reference (a Markdown link and its anchor, a ``:ref:``,
a quoted README section, a repository path) leads somewhere. The MLflow tags the pages name
are checked against a real audit in ``tests/flows/test_audit_mlflow_run.py``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PREFECT_FILE = ROOT / "deployments" / "prefect.yaml"
MARKDOWN = [ROOT / "README.md", ROOT / "deployments" / "README.md", *(ROOT / "docs").glob("*.md")]
# the pages of the checkout, not what a docs build generates beside them (.gitignore)
GENERATED = ("auto_examples", "generated")
RST = sorted(p for p in (ROOT / "docs").rglob("*.rst")
             if not set(GENERATED) & set(p.relative_to(ROOT / "docs").parts)
             and p.name != "sg_execution_times.rst")  # fmt: skip
PAGES = [*MARKDOWN, *RST]
# Where users read commands besides the pages: the deployment file's comments and descriptions.
TEXTS = [*PAGES, PREFECT_FILE]
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
TOP_FOLDERS = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}


def _text(path: Path) -> str:
    """A page with its line breaks and indentation folded into single spaces."""
    return " ".join(path.read_text().split())


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.fixture(scope="module")
def deployments() -> set[str]:
    """``<flow name>/<deployment name>`` of every deployment in prefect.yaml."""
    from prefect.flows import load_flow_from_entrypoint

    spec = yaml.safe_load(PREFECT_FILE.read_text())
    return {
        f"{load_flow_from_entrypoint(str(ROOT / d['entrypoint'])).name}/{d['name']}"
        for d in spec["deployments"]
    }


def test_the_deployments_named_and_counted_are_those_of_prefect_yaml(deployments):
    named, counted = {}, {}
    for path in TEXTS:
        text = _text(path)
        for name in re.findall(r"\b(fairness-[a-z-]+/[a-z][a-z-]*)", text):
            named.setdefault(name, _name(path))
        for number in re.findall(r"defines (\w+) Prefect deployments", text):
            counted[_name(path)] = NUMBERS.get(number, number)
    assert {name: page for name, page in named.items() if name not in deployments} == {}
    assert set(named) == deployments  # each one is documented somewhere
    assert counted and set(counted.values()) == {len(deployments)}, counted


def _values(option: str) -> dict[str, str]:
    """Every value the pages give ``option`` (``--keyfile X`` or ``NAME=X``): value -> page."""
    found = {}
    for path in TEXTS:
        separator = "" if option.endswith("=") else "[ =]"
        for value in re.findall(rf"{re.escape(option)}{separator}([^\s`'\"]+)", path.read_text()):
            if not re.fullmatch(r"[A-Z_]+\]?", value):  # a placeholder: DIR, NAME
                found.setdefault(value, _name(path))
    return found


def test_key_and_policy_files_have_the_names_the_code_gives_them(monkeypatch):
    from fairpca.tasks.trust import GATE_KEY_FILE_ENV, gate_key_path

    monkeypatch.delenv(GATE_KEY_FILE_ENV, raising=False)
    signing_key = gate_key_path().name  # the gate's signing key, where keygen writes it
    tls_keys = _values("--keyfile")
    assert tls_keys and {Path(v).name for v in tls_keys} == {"tls.key"}, tls_keys
    assert {Path(v).name for v in _values("--certfile")} == {"tls.crt"}
    signing = _values(f"{GATE_KEY_FILE_ENV}=")
    assert signing and {Path(v).name for v in signing} == {signing_key}, signing
    # no page calls the TLS key by the signing key's name, or the reverse
    assert signing_key != "tls.key" and not set(tls_keys) & set(signing)
    folders = {**_values("--policy-dir"), **_values("FAIRPCA_GATE_POLICY_DIR=")}
    assert {Path(v).name for v in folders} == {"policies"}, folders


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _headings(path: Path) -> list[str]:
    if path.suffix == ".md":
        return [m for m in re.findall(r"^#+ (.+)$", path.read_text(), flags=re.M)]
    lines = path.read_text().splitlines()
    return [
        lines[i].strip()
        for i in range(len(lines) - 1)
        if lines[i].strip() and re.fullmatch(r"([=\-~^])\1{2,}", lines[i + 1].strip())
    ]


def test_every_markdown_link_and_anchor_resolves():
    broken = []
    for page in MARKDOWN:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            file, _, anchor = target.partition("#")
            where = (page.parent / file).resolve() if file else page
            if not where.exists():
                broken.append(f"{_name(page)}: {target} (no such file)")
            elif anchor and anchor not in {_slug(h) for h in _headings(where)}:
                broken.append(f"{_name(page)}: {target} (no such section)")
    assert broken == []


def test_every_ref_names_a_label():
    labels = set()
    for page in RST:
        labels |= set(re.findall(r"^\.\. _([\w-]+):", page.read_text(), flags=re.M))
    refs = {}
    for page in RST:
        for ref in re.findall(r":ref:`(?:[^`<]*<)?([\w-]+)>?`", page.read_text()):
            refs.setdefault(ref, _name(page))
    assert {ref: page for ref, page in refs.items() if ref not in labels} == {}


def test_every_quoted_section_of_a_readme_exists():
    """``see "Fairness gate" in deployments/README.md``: a section of that README starts so."""
    readmes = {
        "the top-level README": ROOT / "README.md",
        "README.md": ROOT / "README.md",
        "deployments/README.md": ROOT / "deployments" / "README.md",
    }
    pattern = r"\"([^\"]{3,80})\" in (" + "|".join(map(re.escape, readmes)) + ")"
    missing, seen = [], 0
    for path in TEXTS:
        for title, readme in re.findall(pattern, _text(path)):
            seen += 1
            if not any(h.startswith(title) for h in _headings(readmes[readme])):
                missing.append(f'{_name(path)}: "{title}" in {readme}')
    assert seen and missing == []


def test_every_repository_path_named_exists():
    """``tests/e2e/gate_e2e.py``, ``flows/config.py``, ``benchmarks/results/...``: a path whose
    first folder is one of the checkout's names a file or folder of it."""
    missing = []
    for path in TEXTS:
        for ref in re.findall(r"(?<![\w/.$~-])([a-z_]+/[\w./-]*\w)", path.read_text()):
            if ref.split("/")[0] in TOP_FOLDERS and "<" not in ref and not (ROOT / ref).exists():
                missing.append(f"{_name(path)}: {ref}")
    assert missing == []


def test_a_test_without_the_data_says_how_to_get_it(monkeypatch):
    """A ``data`` test skipped for want of ``FAIRPCA_DATA_DIR`` names the file and the page
    that says where to download it, and that page names the file."""
    from data_files import data_dir_or_skip

    compas = "propublica-compas/compas-scores-two-years.csv"
    monkeypatch.delenv("FAIRPCA_DATA_DIR", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        data_dir_or_skip(compas)
    reason = str(skipped.value)
    page = re.search(r"docs/[\w/]+\.rst", reason)[0]
    assert compas in reason and compas in (ROOT / page).read_text()
    assert "FAIRPCA_DATA_DIR=" in reason
