"""``.. config-fields:: package.module.Model``: a table of every setting of a pydantic
config model (section, key, command-line option, default, description), read from the model
itself, so the documentation lists exactly the fields the command line and the flows accept.
"""

from __future__ import annotations

from importlib import import_module

from docutils import nodes
from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from sphinx.util.docutils import SphinxDirective


def _import(path: str) -> type[BaseModel]:
    module, _, name = path.rpartition(".")
    return getattr(import_module(module), name)


def _is_model(annotation) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _default(field) -> str:
    if field.default is not PydanticUndefined:
        return "required" if field.is_required() else repr(field.default)
    if field.default_factory is not None:
        value = field.default_factory()
        return "" if isinstance(value, BaseModel) else repr(value)
    return "required"


def rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    """``(key, option, default, description)`` for every leaf field, sections flattened."""
    out = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        if _is_model(field.annotation):
            out += rows(field.annotation, f"{key}.")
            continue
        option = "--" + name.replace("_", "-")
        out.append((key, option, _default(field), field.description or ""))
    return out


def _row(cells: list[nodes.Node]) -> nodes.row:
    row = nodes.row()
    for cell in cells:
        entry = nodes.entry()
        entry += cell
        row += entry
    return row


class ConfigFields(SphinxDirective):
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        model = _import(self.arguments[0])
        table = nodes.table(classes=["config-fields"])
        group = nodes.tgroup(cols=4)
        table += group
        for width in (22, 18, 14, 46):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        head += _row([nodes.paragraph(text=t) for t in ("key", "option", "default", "meaning")])
        group += head
        body = nodes.tbody()
        for key, option, default, description in rows(model):
            cells = [
                nodes.paragraph("", "", nodes.literal(text=key)),
                nodes.paragraph("", "", nodes.literal(text=option)),
                nodes.paragraph("", "", nodes.literal(text=default)) if default else
                nodes.paragraph(),
                nodes.paragraph(text=description),
            ]  # fmt: skip
            body += _row(cells)
        group += body
        return [table]


def setup(app):
    app.add_directive("config-fields", ConfigFields)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
