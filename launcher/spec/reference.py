"""Render the cluster spec's JSON Schema as a Markdown reference: one table per object of the spec.

    python -m launcher.spec.reference > docs/spec-reference.md

Reads the schema that `launcher.spec.load.json_schema()` generates from the models, plus the defaults
pydantic leaves out of a schema (those made by a default factory, such as `restart.fatal_exit_codes`),
so the page cannot say anything the models do not. It never reads a spec or touches the file system.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

from launcher.spec import hosts, models
from launcher.spec.load import json_schema
from worker import training_spec

__all__ = ["main", "render", "with_factory_defaults"]

Node = dict[str, Any]

HEADER = """\
# Cluster spec reference

Every field of `cluster.json`, generated from the spec's models by
`python -m launcher.spec.reference > docs/spec-reference.md` (do not edit by hand). `launch schema`
prints the same as a JSON Schema. A path such as `hosts[].ssh.user` means the `user` field of the
`ssh` object of any entry of `hosts`. Unknown fields are refused. Bounds are inclusive unless
written with `<` or `>`. The rules that span several fields are in [the cluster spec](cluster-spec.md).
"""


def render(schema: Node) -> str:
    """The whole page for a schema as `json_schema()` returns it."""
    defs: dict[str, Node] = schema.get("$defs", {})
    parts = [HEADER]
    for path, title, node in _objects(schema, "", "The cluster spec", defs):
        parts.append(_table(path, title, node))
    return "\n".join(parts)


def _objects(node: Node, path: str, title: str, defs: dict[str, Node]) -> Iterator[tuple[str, str, Node]]:
    """Every object of the spec, depth first, with its path and a heading."""
    yield path, title, node
    for name, prop in node.get("properties", {}).items():
        child = f"{path}.{name}" if path else name
        for suffix, ref in _refs(prop):
            target = defs[ref]
            kind = target.get("properties", {}).get("kind", {}).get("const")
            heading = f"`{child}{suffix}`" + (f' with `"kind": "{kind}"`' if kind else "")
            yield from _objects(target, child + suffix, heading, defs)


def _refs(prop: Node) -> Iterator[tuple[str, str]]:
    """The objects a field holds: ("", name) for an object, ("[]", name) for a list of them."""
    for option in [prop, *prop.get("anyOf", []), *prop.get("oneOf", [])]:
        if "$ref" in option:
            yield "", option["$ref"].rsplit("/", 1)[-1]
        elif "$ref" in option.get("items", {}):
            yield "[]", option["items"]["$ref"].rsplit("/", 1)[-1]


def _table(path: str, title: str, node: Node) -> str:
    lines = [f"## {title}", ""]
    if node.get("description"):
        lines += [node["description"], ""]
    lines += ["| field | type | default | bounds | description |", "| --- | --- | --- | --- | --- |"]
    required = set(node.get("required", []))
    for name, prop in node.get("properties", {}).items():
        field = f"{path}.{name}" if path else name
        if name in required:
            default = "required"
        elif "default" in prop:
            default = _code(json.dumps(prop["default"]))
        else:
            default = ""
        cells = [_code(field), _type(prop), default, _bounds(prop), _text(prop.get("description", ""))]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _type(node: Node) -> str:
    if "$ref" in node:
        return "object"
    if "anyOf" in node or "oneOf" in node:
        alternatives: list[Node] = node.get("anyOf") or node.get("oneOf") or []
        options = [_type(o) for o in alternatives if o.get("type") != "null"]
        nullable = any(o.get("type") == "null" for o in alternatives)
        return " or ".join(dict.fromkeys(options)) + (" or null" if nullable else "")
    if "const" in node:
        return _code(json.dumps(node["const"]))
    if "enum" in node:
        return " or ".join(_code(json.dumps(v)) for v in node["enum"])
    kind = node.get("type", "any")
    if kind == "array":
        return f"array of {_type(node.get('items', {}))}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"object of {_type(node['additionalProperties'])}"
    return str(kind)


def _bounds(node: Node) -> str:
    found = _own_bounds(node)
    for option in node.get("anyOf", []):
        found += _own_bounds(option)
        if "items" in option:
            found += [f"each {b}" for b in _own_bounds(option["items"])]
    if "items" in node:
        found += [f"each {b}" for b in _own_bounds(node["items"])]
    return "; ".join(found)


def _own_bounds(node: Node) -> list[str]:
    found = []
    low = _limit(node, "minimum", "exclusiveMinimum", ">=", ">")
    high = _limit(node, "maximum", "exclusiveMaximum", "<=", "<")
    if "minimum" in node and "maximum" in node:
        found.append(f"{node['minimum']}..{node['maximum']}")
    elif low or high:
        found.append(", ".join(b for b in (low, high) if b))
    for key, unit in (("Length", "length"), ("Items", "items")):
        low_n, high_n = node.get(f"min{key}"), node.get(f"max{key}")
        if low_n is not None and high_n is not None:
            found.append(f"{unit} {low_n}..{high_n}")
        elif low_n is not None:
            found.append(f"{unit} >= {low_n}")
        elif high_n is not None:
            found.append(f"{unit} <= {high_n}")
    if "pattern" in node:
        found.append(f"matches {_code(node['pattern'])}")
    return found


def _limit(node: Node, inclusive: str, exclusive: str, inclusive_sign: str, exclusive_sign: str) -> str:
    if inclusive in node:
        return f"{inclusive_sign} {node[inclusive]}"
    if exclusive in node:
        return f"{exclusive_sign} {node[exclusive]}"
    return ""


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}"


def _text(text: str) -> str:
    """Prose with `<`, `>` and `&` escaped outside code spans, so `<run dir>` is not taken for HTML."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _cell(text: str) -> str:
    """A table cell: one line, and `|` escaped (GitHub applies the escape inside code spans too)."""
    return " ".join(text.split()).replace("|", "\\|")


def with_factory_defaults(schema: Node) -> Node:
    """The schema with the defaults that a factory makes filled in from the models (pydantic leaves
    them out). A default that is itself a model is shown as the fields that differ from their own
    defaults, plus its `kind` (which picks the training form), e.g. `{}` or `{"kind": "builtin"}`."""
    from pydantic import BaseModel

    for node in [schema, *schema.get("$defs", {}).values()]:
        title = str(node.get("title"))
        model = next((getattr(m, title) for m in (models, hosts, training_spec) if hasattr(m, title)), None)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        for name, field in model.model_fields.items():
            prop = node.get("properties", {}).get(name)
            if prop is None or "default" in prop or field.is_required():
                continue
            value = field.get_default(call_default_factory=True, validated_data={})
            if isinstance(value, BaseModel):
                kind = value.model_dump(mode="json", include={"kind"})  # {} for a model without one
                value = {**kind, **value.model_dump(mode="json", exclude_defaults=True)}
            prop["default"] = value
    return schema


def main() -> None:
    sys.stdout.write(render(with_factory_defaults(json_schema())))


if __name__ == "__main__":
    main()
