"""Matching a module's message constant (a ``str.format`` template) in ``pytest.raises``.

The project's messages that tests check are module constants, as fairlearn keeps them
(``NON_BINARY_LABELS_ERROR_MESSAGE``): a test names the constant, never a copy of its words,
so rewording a message changes one line of the module and no test.
"""

from __future__ import annotations

import re
import string


def matching(template: str, **fields) -> str:
    """A regular expression for ``template`` formatted with ``fields`` (``pytest.raises(...,
    match=matching(CONSTANT, name="x"))``); a field not given matches any text."""
    pattern = []
    for literal, field, spec, conversion in string.Formatter().parse(template):
        pattern.append(re.escape(literal))
        if field is None:
            continue
        if field not in fields:
            pattern.append(".*?")
            continue
        one = "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
        pattern.append(re.escape((one + "}").format(**{field: fields[field]})))
    return "".join(pattern)
