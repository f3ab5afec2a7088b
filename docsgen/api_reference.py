"""The HTTP API reference, generated from the app's OpenAPI schema."""

import json
from typing import Any

from docsgen.text import escape_cell, escape_text, slugify

METHODS = ("get", "post", "put", "patch", "delete")


def openapi_schema() -> dict[str, Any]:
    """The schema ``specledger serve`` publishes at ``/openapi.json`` (no database needed)."""
    from app.main import create_app

    schema: dict[str, Any] = create_app().openapi()
    return schema


def schema_type(schema: dict[str, Any]) -> str:
    """A short name for a JSON schema: ``string (date-time)``, ``array of Budget``, ..."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " or ".join(schema_type(s) for s in schema[key])
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {schema_type(schema.get('items', {}))}"
    if "format" in schema:
        return f"{kind} ({schema['format']})"
    return str(kind)


def _schema_link(name: str, schemas: dict[str, Any]) -> str:
    return f"[`{name}`](#{slugify(name)})" if name in schemas else f"`{name}`"


def _body_type(content: dict[str, Any], schemas: dict[str, Any]) -> str:
    shown = []
    for media, spec in content.items():
        inner = spec.get("schema", {})
        name = schema_type(inner)
        name = _schema_link(name, schemas) if "$ref" in inner else escape_cell(name)
        shown.append(f"`{media}`: {name}")
    return "; ".join(shown)


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(METHOD, path, operation) for every operation, in the schema's order."""
    found = []
    for path, item in schema.get("paths", {}).items():
        for method in METHODS:
            if method in item:
                found.append((method.upper(), path, item[method]))
    return found


def render(schema: dict[str, Any] | None = None) -> str:
    """The reference page: every operation (parameters, body, answers) and every schema."""
    schema = schema if schema is not None else openapi_schema()
    schemas: dict[str, Any] = schema.get("components", {}).get("schemas", {})
    info = schema.get("info", {})
    lines = [
        "# HTTP API reference",
        "",
        f"{escape_text(info.get('title', 'API'))} {info.get('version', '')}: generated from the "
        "OpenAPI schema that `specledger serve` publishes at `/openapi.json` (interactive at "
        "`/docs`) when the site is built. The [cost API](../cost-api.md) page explains keys, "
        "errors and the dashboards.",
        "",
        "## Operations",
        "",
        "| Method | Path | Summary |",
        "| --- | --- | --- |",
    ]
    ops = operations(schema)
    for method, path, op in ops:
        anchor = f"{method} {path}"
        lines.append(
            f"| {method} | [`{path}`](#{slugify(anchor)}) | {escape_cell(op.get('summary', ''))} |"
        )
    lines.append("")
    for method, path, op in ops:
        lines += [f"### {method} {path}", ""]
        if op.get("summary"):
            lines += [f"**{escape_text(op['summary'])}**", ""]
        if op.get("description"):
            lines += [escape_text(op["description"].strip()), ""]
        params = op.get("parameters", [])
        if params:
            lines += [
                "| Parameter | In | Required | Type | Meaning |",
                "| --- | --- | --- | --- | --- |",
            ]
            for p in params:
                lines.append(
                    f"| `{p['name']}` | {p.get('in', '')} | {'yes' if p.get('required') else 'no'} | "
                    f"{escape_cell(schema_type(p.get('schema', {})))} | "
                    f"{escape_cell(p.get('description', p.get('schema', {}).get('description', '')))} |"
                )
            lines.append("")
        body = op.get("requestBody")
        if body:
            lines += [f"Body: {_body_type(body.get('content', {}), schemas)}", ""]
        responses = op.get("responses", {})
        if responses:
            lines += ["| Status | Meaning | Body |", "| --- | --- | --- |"]
            for status, answer in responses.items():
                lines.append(
                    f"| {status} | {escape_cell(answer.get('description', ''))} | "
                    f"{_body_type(answer.get('content', {}), schemas)} |"
                )
            lines.append("")
    lines += ["## Schemas", ""]
    for name, spec in schemas.items():
        lines += [f"### {name}", ""]
        if spec.get("description"):
            lines += [escape_text(spec["description"].strip()), ""]
        properties = spec.get("properties", {})
        required = set(spec.get("required", []))
        if properties:
            lines += ["| Field | Type | Required | Meaning |", "| --- | --- | --- | --- |"]
            for field, prop in properties.items():
                lines.append(
                    f"| `{field}` | {escape_cell(schema_type(prop))} | "
                    f"{'yes' if field in required else 'no'} | "
                    f"{escape_cell(prop.get('description', ''))} |"
                )
            lines.append("")
        elif "enum" in spec:
            lines += [escape_text(schema_type(spec)), ""]
    return "\n".join(lines).rstrip() + "\n"


def schema_json(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"
