"""A small JSON Schema validator for the subset the structured-output tests use (type,
properties, required, additionalProperties, items, minItems, maxItems, enum, const,
minLength, maxLength): the project does not depend on ``jsonschema``."""

from __future__ import annotations

from typing import Any

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def errors(value: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    found: list[str] = []
    kind = schema.get("type")
    if kind == "integer":
        if not (isinstance(value, int) and not isinstance(value, bool)):
            return [f"{where or '/'}: not an integer"]
    elif kind == "number":
        if not (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return [f"{where or '/'}: not a number"]
    elif kind is not None and not isinstance(value, _TYPES[kind]):
        return [f"{where or '/'}: not {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where or '/'}: {value!r} not in enum")
    if "const" in schema and value != schema["const"]:
        found.append(f"{where or '/'}: not the const")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 1 << 30):
            found.append(f"{where or '/'}: length {len(value)} out of bounds")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", 1 << 30):
            found.append(f"{where or '/'}: {len(value)} items out of bounds")
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                found += errors(item, schema["items"], f"{where}/{i}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                found.append(f"{where or '/'}: {key!r} missing")
        for key, item in value.items():
            if key in props:
                found += errors(item, props[key], f"{where}/{key}")
            elif schema.get("additionalProperties") is False:
                found.append(f"{where or '/'}: extra key {key!r}")
    return found
