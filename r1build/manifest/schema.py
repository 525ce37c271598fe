"""The manifest's JSON schema, generated from the dataclasses in :mod:`r1build.manifest.model`.

Descriptions come from the docstring under each field. The committed ``kernels.schema.json`` and the generated
reference pages of the documentation (``docs/reference/manifest.md`` from the model, ``docs/reference/environment.md``
from :mod:`r1build.settings`) are checked to be current by the tests; regenerate them with
``python -m r1build.manifest.schema``.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from ..convert import MISSING, field_key, fields, is_record
from . import model
from .bounds import Bounds, field_bounds

__all__ = [
    "ENVIRONMENT_PAGE",
    "MANIFEST_PAGE",
    "REFERENCE_MARKERS",
    "SCHEMA_PATH",
    "generate_schema",
    "render_reference",
    "render_schema",
    "update_page",
]

SCHEMA_PATH = Path(__file__).with_name("kernels.schema.json")
_DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference"
MANIFEST_PAGE = _DOCS / "manifest.md"
"""The documentation's manifest reference (in a source checkout; an installed r1build has no docs)."""
ENVIRONMENT_PAGE = _DOCS / "environment.md"
"""The documentation's table of environment variables, from :mod:`r1build.settings`'s docstring."""
REFERENCE_MARKERS = ("<!-- generated:start -->", "<!-- generated:end -->")
"""What encloses the generated part of a reference page."""
_SECTIONS = {
    "KernelSpec": "`[[kernel]]`, one per kernel",
    "Arg": "`args` items (inline tables, in parameter order)",
    "Tolerance": "`tolerance`",
    "Limits": "`limits` (checked by the static gate against the ptxas report)",
    "Budget": "`budget` (generation search budget per kernel and arch)",
    "Generation": "`[generation]`",
    "Prices": "`generation.prices`",
    "CacheSettings": "`[cache]` (the remote cache and the keys trusted to sign what it holds)",
    "EvaluationSettings": "`[evaluation]` (where GPU evaluation runs: this machine, or a Dask cluster)",
    "BindingsSettings": "`[bindings]` (Python bindings and PyTorch custom ops written for the kernels)",
}


def field_docs(cls: type) -> dict[str, str]:
    """Docstrings written under each field of a dataclass."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, following in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def _schema_of(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = get_origin(tp)
    if is_record(tp) and isinstance(tp, type):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}
            defs[name] = _object_schema(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        if len(options) == 1:
            return _schema_of(options[0], defs)
        return {"anyOf": [_schema_of(a, defs) for a in options]}
    if origin is Literal:
        return {"enum": list(get_args(tp))}
    if origin is list:
        return {"type": "array", "items": _schema_of(get_args(tp)[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema_of(get_args(tp)[1], defs)}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return {"type": simple[tp]}


def _object_schema(cls: type, defs: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    props: dict[str, Any] = {}
    required = []
    for f in fields(cls):
        if f.name in skip:
            continue
        prop = dict(_schema_of(hints[f.name], defs))
        bounds = field_bounds(f)
        if bounds is not None:
            prop.update(bounds.json_schema())
        if f.name in docs:
            prop["description"] = docs[f.name]
        if f.default is not MISSING and f.default is not None:
            prop["default"] = f.default
        elif f.default_factory is not MISSING:
            value = f.default_factory()
            if not is_record(value):
                prop["default"] = value
        if f.default is MISSING and f.default_factory is MISSING:
            required.append(field_key(f.name))
        props[field_key(f.name)] = prop
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": props}
    if cls.__doc__:
        out["description"] = " ".join(cls.__doc__.split())
    if required:
        out["required"] = required
    return out


def generate_schema() -> dict[str, Any]:
    """The JSON schema of a manifest (kernels.toml, or the [tool.r1build] table)."""
    defs: dict[str, Any] = {}
    root = _object_schema(model.ProjectSettings, defs)
    root["properties"]["kernel"] = {
        "type": "array",
        "description": "The kernels, one [[kernel]] table each.",
        "items": _schema_of(model.KernelSpec, defs),
    }
    root["required"] = ["kernel"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://r1build.dev/schema/kernels.schema.json",
        "title": "r1build manifest",
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def render_schema() -> str:
    """The schema as committed: indented JSON with a trailing newline."""
    return json.dumps(generate_schema(), indent=2, sort_keys=False) + "\n"


def _type_cell(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return " \\| ".join(str(v) for v in prop["enum"])
    if "anyOf" in prop:
        return " or ".join(str(p.get("type", "table")) for p in prop["anyOf"])
    if "$ref" in prop or prop.get("type") == "object":
        return "table"
    bounds = Bounds(
        ge=prop.get("minimum"), gt=prop.get("exclusiveMinimum"), le=prop.get("maximum"), lt=prop.get("exclusiveMaximum")
    ).render()
    return str(prop.get("type", "")) + (f" ({bounds})" if bounds else "")


def _table(props: dict[str, Any]) -> list[str]:
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for key, prop in props.items():
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop else ""
        meaning = prop.get("description", "").replace("``", "`").replace("|", "\\|")
        lines.append(f"| `{key}` | {_type_cell(prop)} | {default} | {meaning} |")
    return lines


def render_reference() -> str:
    """The manifest reference: one table per section, generated from the schema."""
    schema = generate_schema()
    lines = ["## Top level (or `[tool.r1build]`)", ""]
    lines += _table({k: v for k, v in schema["properties"].items() if k != "kernel"})
    for name, title in _SECTIONS.items():
        lines += ["", f"## {title}", "", *_table(schema["$defs"][name]["properties"])]
    return "\n".join(lines)


def update_page(text: str, generated: str) -> str:
    """``text`` (a reference page) with the part between :data:`REFERENCE_MARKERS` replaced by ``generated``."""
    start, end = REFERENCE_MARKERS
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n{generated}\n{end}{tail}"


if __name__ == "__main__":  # pragma: no cover
    from r1build.settings import render_variables

    SCHEMA_PATH.write_text(render_schema(), encoding="utf-8")
    for page, generated in ((MANIFEST_PAGE, render_reference()), (ENVIRONMENT_PAGE, render_variables())):
        if page.is_file():
            page.write_text(update_page(page.read_text(encoding="utf-8"), generated), encoding="utf-8")
    sys.stdout.write(f"wrote {SCHEMA_PATH}, {MANIFEST_PAGE.name} and {ENVIRONMENT_PAGE.name} of docs/reference\n")
