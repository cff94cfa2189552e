"""User-supplied strings are escaped where rendered (``fairpca.tasks.report``)."""

from __future__ import annotations

import csv
import io
import re

import pandas as pd
import pytest
from records import ATTRIBUTE, CONTROLS, GROUP, SOURCE, with_bidi_names

from fairpca.tasks.report import FORMULA_START, csv_cell, markdown_text, write_safe_csv

PAYLOADS = [
    "<img src=x onerror=alert(1)>",
    "<script>alert(1)</script>",
    "[x](javascript:alert(1))",
    "![x](http://evil/x.png)",
    "a`b` **c** _d_ | e",
    "line1\nline2\r\n| x |",
    "~~struck~~ $x^2$ &amp; \\*not emphasis\\*",
    "- a list item",
    "1. an ordered item",
    "# a heading",
    "> a quote",
    "---",
    "    indented text",
]


def _rendered(markdown: str) -> list:
    """The inline tokens of ``markdown`` rendered as CommonMark with GitHub's tables and
    strikethrough (markdown-it-py)."""
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    return [token for token in parser.parse(markdown) if token.type == "inline"]


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("where", ["{}", "- {}", "| a |\n|---|\n| {} |"])
def test_markdown_text_renders_as_the_literal_text(payload, where):
    """In a paragraph, a list item or a table cell the escaped text is one text node that
    reads as the input (line breaks as spaces): no markup, no HTML, no block."""
    expected = re.sub(r"[\r\n]+", " ", payload).strip()
    (cell,) = _rendered(where.format(markdown_text(payload)))[-1:]
    assert {child.type for child in cell.children} == {"text"}, cell.children
    assert "".join(child.content for child in cell.children) == expected


def test_markdown_text_escapes_only_what_starts_markup():
    """Names and numbers read as written: no backslash before -, ., _ inside a word, (, !."""
    for plain in ["audit-adult-income_gt_50k-sex-2026", "0.768", "fair_pca/logreg@lambda=0.125",
                  "(chosen)", "-0.05", "ΔDP 0.282!"]:  # fmt: skip
        assert markdown_text(plain) == plain
    # GitHub's extended autolinks (www., e-mail, scheme://) cannot start
    assert markdown_text("www.evil.com x@evil.org https://e.org") == (
        "www\\.evil\\.com x@evil\\.org https\\://e\\.org"
    )


def test_markdown_text_is_markdown_not_html_entities():
    """The Markdown source reads as written: a backslash before < and &, no entity."""
    out = markdown_text("DP difference <= 0.05, the policy's band & more")
    assert out == "DP difference \\<= 0.05, the policy's band \\& more"
    assert "&lt;" not in out and "&#x27;" not in out


@pytest.mark.parametrize("start", FORMULA_START)
def test_csv_cells_cannot_start_a_formula(start):
    frame = pd.DataFrame({f"{start}col": [f"{start}HYPERLINK(1)", "plain"], "n": [-1.5, 2.0]})
    buffer = io.StringIO()
    write_safe_csv(frame, buffer, index=False)
    text = buffer.getvalue()
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert not any(cell.startswith(FORMULA_START) for row in rows for cell in row[:1])
    assert [row[1] for row in rows] == ["n", "-1.5", "2.0"]  # numbers stay numbers
    assert csv_cell(3) == 3 and csv_cell("ok") == "ok"


@pytest.mark.parametrize("start", FORMULA_START)
def test_categorical_cells_and_index_labels_cannot_start_a_formula(start):
    """A group name read as a pandas category, or kept as the index, is escaped too."""
    names = pd.Categorical([f"{start}cmd|' /C calc'!A0", "plain"])
    frame = pd.DataFrame({"group": names, "n": [1, 2]}, index=[f"{start}row", "ok"])
    buffer = io.StringIO()
    write_safe_csv(frame, buffer)
    rows = list(csv.reader(io.StringIO(buffer.getvalue(), newline="")))
    assert not any(cell.startswith(FORMULA_START) for row in rows for cell in row)
    assert [row[2] for row in rows] == ["n", "1", "2"]


def test_plots_drawn_inside_literal_plot_text_show_dollar_labels_as_written(
    tmp_path, dollar_labels, drawn_literally
):
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from fairpca.tasks.report import literal_plot_text

    def draw(path):
        figure = Figure()
        FigureCanvasAgg(figure)
        axes = figure.subplots()
        axes.bar([0, 1], [0.2, 0.4])
        axes.set_xticks([0, 1], dollar_labels)
        axes.set_title(dollar_labels[1])
        figure.savefig(path)
        return figure

    with pytest.raises(ValueError, match="x\\^"):  # what matplotlib does by default
        draw(tmp_path / "math.png")
    with literal_plot_text():
        figure = draw(tmp_path / "literal.png")
    assert drawn_literally(figure, dollar_labels)
    assert matplotlib.rcParams["text.parse_math"]  # restored on the way out
    assert markdown_text("$50k-$100k") == "\\$50k-\\$100k"  # no math in GitHub's Markdown


# ---- bidirectional controls (issue 53): shown as their code points on every surface --------


def test_visible_text_shows_every_bidirectional_control_as_its_code_point():
    from fairpca.tasks.trust import visible_text

    shown = visible_text(f"a{CONTROLS}b")
    assert not set(shown) & set(CONTROLS)
    assert shown == "a" + "".join(f"<U+{ord(c):04X}>" for c in CONTROLS) + "b"
    assert visible_text("Müller, 東京, \u05e9\u05dc\u05d5\u05dd") == "Müller, 東京, שלום"


def test_bidirectional_controls_in_names_are_shown_escaped_on_every_surface(audit_record):
    """Issue 53: U+202E in a group name was shown raw in report.html (and the terminal,
    ``tests/flows/test_console_summary.py``), so a name could read reversed. The report
    (HTML, Markdown), the model card, the MLflow run and version descriptions, the Prefect
    verdict and the gate's card show each control as ``<U+202E>``."""
    import html

    from markdown_it import MarkdownIt

    from fairpca.tasks.report import (
        render_html,
        render_markdown,
        render_model_card,
        render_template,
        report_sections,
        report_title,
        run_description,
        verdict_markdown,
        version_description,
    )

    record = with_bidi_names(audit_record)
    sections, title = report_sections(record), report_title(record)
    metrics = {"accuracy": 0.8, f"dp_difference.{ATTRIBUTE}": 0.01}
    gate_card = render_template(  # as fairpca.flows.gate.record_verdict renders it
        "gate_card.md.j2", name=f"credit-{SOURCE}", version="3", status="failed",
        now="2026-12-07T00:00:00Z", reasons=[f"group {GROUP} is small"], metrics=metrics,
        shown=list(metrics), facts={"reference": f"{SOURCE}.csv"},
    )  # fmt: skip
    markdown = {
        "report.md": render_markdown(title, sections, "tradeoff.png"),
        "model card": render_model_card(record),
        "run description": run_description(record),
        "version description": version_description(record, "0123abcd", "http://x/card"),
        "Prefect verdict": verdict_markdown(record, heading=f"Fairness audit {SOURCE}"),
        "gate card": gate_card,
    }
    shown = {where: MarkdownIt("commonmark").enable("table").render(text)
             for where, text in markdown.items()}  # fmt: skip
    shown["report.html"] = render_html(title, sections, None)
    for where, text in {**markdown, **shown}.items():
        assert not set(text) & set(CONTROLS), where
    for where, page in shown.items():
        readable = html.unescape(page)
        assert "<U+202E>" in readable or "<U+2067>" in readable, where
    assert "A<U+202E>1 puorG" in html.unescape(shown["report.html"])
    assert "A<U+202E>1 puorG" in html.unescape(shown["model card"])
    assert "<U+2067>" in html.unescape(shown["gate card"])
