"""Tests of behaviour check a refusal by its type, its structured fields and the module's
message constant (``pytest.raises(SealError, match=matching(FILES_ADDED, added=[...]))``,
tests/messages.py), not by words copied from the message: a reworded message then changes
one line of its module and no test. The words a user reads are checked once, in the rendering
test of each surface (the report, the model card, the console summary)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# ``match="..."`` holding three or more words in a row: a sentence copied from a message
SENTENCE_MATCH = re.compile(r"""match=r?["'][^"']*\w+ \w+ \w+""")
# The two left match third-party messages (urllib3's through MLflow, scikit-learn's), which
# have no constant to name.
MOST_SENTENCE_MATCHES = 2


def sentence_matches(*layers: str) -> list[str]:
    """``path:line`` of every sentence match in the test files of ``layers``."""
    found = []
    for layer in layers:
        for path in sorted((TESTS / layer).rglob("test_*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if SENTENCE_MATCH.search(line):
                    found.append(f"{path.relative_to(TESTS)}:{number}")
    return found


def test_refusals_of_tasks_and_flows_are_matched_by_constants_not_sentences():
    found = sentence_matches("tasks", "flows")
    assert len(found) <= MOST_SENTENCE_MATCHES, (
        f"{len(found)} pytest.raises/warns match a sentence (at most {MOST_SENTENCE_MATCHES}): "
        f"{found}. Make the message a constant of the module that raises it and match "
        "matching(CONSTANT, field=value) (tests/messages.py), or check the exception's type "
        "and fields."
    )
