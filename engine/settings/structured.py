"""Structured output: a reply constrained to JSON, to a JSON Schema, or to a GBNF grammar.

An :class:`OutputFormat` travels on :class:`~vibechat.engine.settings.params.SamplingParams`
(``output_format``), so it crosses the worker's pipe (it pickles) and is saved with a
conversation's parameters. It carries the text itself (a schema's JSON, a grammar), never a
path: a saved conversation does not depend on a file that may change.

The local engine turns it into GBNF (llama-cpp-python's schema converter) for llama.cpp's
grammar sampler; the OpenAI-compatible backend sends ``response_format``. What can be wrong
with a format (a file that does not parse, a schema keyword the converter cannot express)
is found here, and a grammar llama.cpp's parser rejects by ``native.check_output_format``:
one-line :class:`InvalidParameterError`\\ s, before a model loads.

Imports inside functions are deliberate: jsonschema and llama-cpp-python's grammar helpers load
only when a structured reply is asked for (start-up time).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import InvalidParameterError
from ..files import UnreadableFile, read_file_text
from ..json_bounds import json_depth

FormatKind = Literal["json", "schema", "grammar"]
# Whether a reply is what its format asks (OutputFormat.judge): whole and matching, cut short
# (JSON that does not parse, a grammar the sampler did not accept), or JSON that is not what was
# asked.
ReplyState = Literal["complete", "incomplete", "invalid"]
_KINDS = ("json", "schema", "grammar")
MAX_FORMAT_BYTES = 1_000_000
# Bounds checked before a schema or grammar reaches the converter or llama.cpp, which expand
# repetitions into text (a 43-byte {"minLength": 1000000000} asked for gigabytes) and parse
# nesting by recursion (100,000 nested parentheses crash the process). llama.cpp itself refuses
# repetitions of a rule beyond ~2,000; a schema nested deeper than a person writes is no schema.
# minLength, maxLength, minItems, maxItems, a pattern's {m,n}.
MAX_REPEAT = 1000
# JSON levels of the schema document (about 30 levels of subschemas).
MAX_SCHEMA_DEPTH = 64
MAX_PATTERN_CHARS = 2000
MAX_PATTERN_NESTING = 32
# Parentheses inside one another in the GBNF.
MAX_GRAMMAR_NESTING = 2000
MAX_GRAMMAR_BYTES = 1_000_000
_REPEAT_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems")

# JSON Schema keywords llama-cpp-python's converter (llama_grammar.SchemaConverter) ignores
# silently: a reply would not honour them, so a schema that uses one is refused.
UNSUPPORTED_KEYWORDS = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "patternProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "unevaluatedProperties",
        "unevaluatedItems",
        "contains",
        "minContains",
        "maxContains",
        "uniqueItems",
        "multipleOf",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "$dynamicRef",
        "$recursiveRef",
    }
)
SUPPORTED_FORMATS = frozenset(
    {"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"}
)
# Keywords whose values are schemas, or maps/lists of schemas, to walk into.
_SUBSCHEMA = ("items", "additionalProperties", "additionalItems")
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


@dataclass(frozen=True)
class OutputFormat:
    """What a reply must be: ``json`` (any JSON object), ``schema`` (``text`` is the JSON
    Schema) or ``grammar`` (``text`` is GBNF with a ``root`` rule). ``name`` says where it
    came from (a file's name, ``inline``), for the status bar."""

    kind: FormatKind
    text: str = ""
    name: str = ""

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise InvalidParameterError(
                f"output format must be one of {', '.join(_KINDS)} (got {self.kind!r})."
            )
        if self.kind != "json" and not self.text.strip():
            raise InvalidParameterError(f"the {self.kind} is empty.")

    # ---------------------------------------------------------------- making one
    @classmethod
    def parse(cls, spec: str, kind: FormatKind | None = None) -> OutputFormat:
        """From what a user typed: ``json``, inline JSON (a schema), or a file: ``*.gbnf``
        is a grammar, anything else a schema; ``kind`` forces one. A schema must parse; the
        rest is checked per backend (:meth:`check`, :meth:`check_remote`)."""
        raw = spec.strip()
        if not raw:
            raise InvalidParameterError(
                "give a JSON Schema (a file or inline JSON), a .gbnf grammar file, or 'json'."
            )
        if kind is None and raw.lower() == "json":
            return cls("json", name="json")
        if raw.startswith("{") and kind != "grammar":
            fmt = cls("schema", raw, "inline")
        else:
            path = Path(raw).expanduser()
            what = "grammar" if kind == "grammar" else "schema" if kind == "schema" else "file"
            wanted = {"grammar": "a GBNF grammar file", "schema": "a JSON Schema file"}.get(
                what, "a JSON Schema file or a .gbnf grammar file"
            )
            try:
                text = read_file_text(path, MAX_FORMAT_BYTES)
            except FileNotFoundError:
                raise InvalidParameterError(f"{what} {raw}: no such file.") from None
            except UnreadableFile as exc:
                raise InvalidParameterError(f"{what} {raw} {exc.reason}: give {wanted}.") from None
            except UnicodeDecodeError:
                raise InvalidParameterError(
                    f"{what} {raw} is not UTF-8 text: give {wanted}."
                ) from None
            except OSError as exc:
                raise InvalidParameterError(
                    f"{what} {raw}: cannot read it ({exc.strerror or exc})."
                ) from None
            if kind is None:
                kind = "grammar" if path.suffix.lower() == ".gbnf" else "schema"
            fmt = cls(kind, text, path.name)
        # A schema must be a JSON object; what else it needs depends on the backend.
        fmt.schema()
        return fmt

    @classmethod
    def from_dict(cls, data: Any) -> OutputFormat:
        if not isinstance(data, dict):
            raise InvalidParameterError("output_format must be an object with kind and text.")
        kind = data.get("kind")
        if kind not in _KINDS:
            raise InvalidParameterError(
                f"output format must be one of {', '.join(_KINDS)} (got {kind!r})."
            )
        return cls(kind=kind, text=data.get("text", "") or "", name=data.get("name", "") or "")

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text, "name": self.name}

    # ---------------------------------------------------------------- what it is
    @property
    def label(self) -> str:
        """Short, for the status bar: ``json``, ``schema person.json``, ``grammar list.gbnf``."""
        return "json" if self.kind == "json" else f"{self.kind} {self.name or 'inline'}"

    def schema(self) -> dict[str, Any] | None:
        """The JSON Schema as an object (``None`` for ``json`` and grammars)."""
        return _schema(self.text) if self.kind == "schema" else None

    def check(self) -> None:
        """Raise a one-line ``InvalidParameterError`` if this cannot become a grammar (a schema
        that does not parse, or uses what the converter cannot express). Whether llama.cpp's
        parser takes the grammar is ``native.check_output_format``'s to say."""
        self.gbnf()

    def check_remote(self) -> None:
        """What an OpenAI-compatible server needs: a schema that parses; no grammar."""
        if self.kind == "grammar":
            raise InvalidParameterError(
                "a GBNF grammar works only with the local engine; "
                "use a JSON Schema with a remote server."
            )
        if self.kind == "schema":
            self.schema()

    def gbnf(self) -> str:
        """The GBNF grammar for llama.cpp's grammar sampler, within the bounds above."""
        if self.kind == "grammar":
            check_grammar_bounds(self.text)
            return self.text
        if self.kind == "json":
            return _json_gbnf()
        return _schema_gbnf(self.text)

    def judge(self, text: str, accepted: bool = False) -> tuple[ReplyState, str]:
        """Whether ``text`` is a whole reply in this format, and if not, why (a few words).
        ``accepted``: the local engine's grammar sampler allowed the reply's end (it does only
        once the grammar is complete): what a grammar's output is judged by, as its text
        cannot be. JSON is judged by its text, whoever wrote it (a server may ignore
        ``response_format``): ``complete`` when it parses and is an object (``json``) or
        matches the schema; ``incomplete`` when it does not parse (cut short); ``invalid``
        when it parses but is not what was asked. Bounded: JSON nested past
        :data:`MAX_SCHEMA_DEPTH` levels is not parsed (``invalid``)."""
        if self.kind == "grammar":
            return ("complete", "") if accepted else ("incomplete", "its grammar was not complete")
        if json_depth(text, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
            return "invalid", f"its JSON is nested more than {MAX_SCHEMA_DEPTH} levels deep"
        try:
            value = json.loads(text)
        except ValueError:
            # Cut short, unless the grammar accepted it (then it is not JSON).
            if accepted:
                return ("invalid", "its text is not valid JSON")
            return ("incomplete", "its JSON was not complete")
        if self.kind == "json":
            return (
                ("complete", "")
                if isinstance(value, dict)
                else ("invalid", "its JSON is not an object")
            )
        problem = _schema_mismatch(value, self.schema() or {})
        return (
            ("invalid", f"its JSON does not match the schema ({problem})")
            if problem
            else ("complete", "")
        )

    def response_format(self) -> dict[str, Any]:
        """OpenAI's ``response_format`` for this format (not for grammars)."""
        if self.kind == "json":
            return {"type": "json_object"}
        if self.kind == "schema":
            name = Path(self.name).stem if self.name and self.name != "inline" else "reply"
            name = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:64] or "reply"
            return {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": self.schema(), "strict": True},
            }
        raise InvalidParameterError("a GBNF grammar works only with the local engine.")


def _schema(text: str) -> dict[str, Any]:
    if json_depth(text, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise InvalidParameterError(
            f"the JSON Schema is nested more than {MAX_SCHEMA_DEPTH} levels deep: "
            "flatten it (use $defs and $ref for what repeats)."
        )
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidParameterError(f"the JSON Schema is not valid JSON ({exc}).") from None
    if not isinstance(value, dict):
        raise InvalidParameterError(
            f"a JSON Schema must be a JSON object (got {type(value).__name__})."
        )
    return value


def _schema_mismatch(value: Any, schema: dict[str, Any]) -> str | None:
    """The first way ``value`` does not match ``schema`` (where, and what: one line of at most
    200 characters), or None. ``jsonschema`` (imported only here: a reply under a schema is
    judged once it ends) checks what the grammar converter expresses, but for ``format`` and
    ``pattern`` (:func:`_without_patterns`), which the grammar (or a server's strict
    ``response_format``) enforced. A schema the validator cannot apply (a ``$ref`` it cannot
    resolve, a keyword it rejects) judges nothing: None."""
    import jsonschema

    schema = _without_patterns(schema)
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except RecursionError:
        return "nested too deep to check"
    except Exception:  # noqa: BLE001
        # The validator's own failures (referencing, schema errors) vary by version.
        return None
    if error is None:
        return None
    where = "/" + "/".join(str(part) for part in error.absolute_path)
    message = " ".join(error.message.split())
    return f"at {where}: {message}"[:200]


def _without_patterns(schema: Any) -> Any:
    """``schema`` without its ``pattern`` keywords (a string's, never a property named so,
    whose value is a schema). Python's ``re`` has no time bound, and a pattern such as
    ``^(a+)+$`` takes exponential time on text it does not match: the model's text is not run
    through the user's pattern. Recursion bounded by the schema's depth (MAX_SCHEMA_DEPTH)."""
    if isinstance(schema, list):
        return [_without_patterns(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: _without_patterns(value)
        for key, value in schema.items()
        if not (key == "pattern" and isinstance(value, str))
    }


def too_large(schema: dict[str, Any]) -> str | None:
    """What in ``schema`` would expand past the bounds once converted (a repetition count, a
    pattern's quantifier or nesting), with where it is, or None. Walks without recursion."""
    stack: list[tuple[Any, str]] = [(schema, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, list):
            stack.extend((item, f"{where}/{i}") for i, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        for key in _REPEAT_KEYWORDS:
            value = node.get(key)
            if (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and value > MAX_REPEAT
            ):
                shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
                return f"{key} {shown} at {where or '/'} (at most {MAX_REPEAT:,})"
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            found = _pattern_problem(pattern)
            if found:
                return f"{found} in the pattern at {where or '/'}"
        stack.extend(
            (value, f"{where}/{key}")
            for key, value in node.items()
            if isinstance(value, (dict, list))
        )
    return None


_QUANTIFIER = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


def _pattern_problem(pattern: str) -> str | None:
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"{len(pattern):,} characters (at most {MAX_PATTERN_CHARS:,})"
    for match in _QUANTIFIER.finditer(pattern):
        for number in match.groups():
            if number and int(number) > MAX_REPEAT:
                return f"the repetition {match.group(0)} (at most {MAX_REPEAT:,})"
    depth = deepest = 0
    escaped = False
    for ch in pattern:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
    if deepest > MAX_PATTERN_NESTING:
        return f"groups nested {deepest} deep (at most {MAX_PATTERN_NESTING})"
    return None


def check_grammar_bounds(gbnf: str) -> None:
    """Refuse, in one line, a GBNF grammar llama.cpp's parser could crash on (parentheses
    nested past :data:`MAX_GRAMMAR_NESTING`: it recurses per level) or that is too large.
    Strings, character classes and comments are skipped. Linear in the text."""
    if len(gbnf) > MAX_GRAMMAR_BYTES:
        raise InvalidParameterError(
            f"the grammar is {len(gbnf):,} characters long (at most "
            f"{MAX_GRAMMAR_BYTES:,}): simplify it."
        )
    depth = 0
    # '"' inside a string, "]" inside a character class.
    quote: str | None = None
    escaped = comment = False
    for ch in gbnf:
        if comment:
            comment = ch != "\n"
        elif quote is not None:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch == "#":
            comment = True
        elif ch == '"':
            quote = '"'
        elif ch == "[":
            quote = "]"
        elif ch == "(":
            depth += 1
            if depth > MAX_GRAMMAR_NESTING:
                raise InvalidParameterError(
                    f"the grammar nests parentheses more than {MAX_GRAMMAR_NESTING:,} "
                    "deep, which llama.cpp's parser cannot take: use named rules."
                )
        elif ch == ")":
            depth -= 1


def unsupported_feature(schema: Any, where: str = "") -> str | None:
    """The first schema keyword the grammar converter cannot express, with where it is
    (``'minimum' at /properties/age``), or None."""
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return f"a schema that is a {type(schema).__name__} at {where or '/'}"
    for key in schema:
        if key in UNSUPPORTED_KEYWORDS:
            return f"{key!r} at {where or '/'}"
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt not in SUPPORTED_FORMATS:
        return f"format {fmt!r} at {where or '/'}"
    ref = schema.get("$ref")
    if isinstance(ref, str) and not ref.startswith("#"):
        return f"the remote $ref {ref!r} at {where or '/'}"
    for key in _SUBSCHEMA:
        if isinstance(schema.get(key), (dict, bool)):
            found = unsupported_feature(schema[key], f"{where}/{key}")
            if found:
                return found
    for key in _SCHEMA_MAPS:
        value = schema.get(key)
        if isinstance(value, dict):
            for name, sub in value.items():
                found = unsupported_feature(sub, f"{where}/{key}/{name}")
                if found:
                    return found
    for key in _SCHEMA_LISTS:
        value = schema.get(key)
        if isinstance(value, list):
            for i, sub in enumerate(value):
                found = unsupported_feature(sub, f"{where}/{key}/{i}")
                if found:
                    return found
    return None


@functools.lru_cache(maxsize=16)
def _schema_gbnf(text: str) -> str:
    schema = _schema(text)
    found = unsupported_feature(schema)
    if found:
        raise InvalidParameterError(
            f"the JSON Schema uses {found}, which llama.cpp's grammar cannot express."
        )
    found = too_large(schema)
    if found:
        raise InvalidParameterError(f"the JSON Schema asks for {found}: lower it.")
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        gbnf = json_schema_to_gbnf(json.dumps(schema))
    except (AssertionError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise InvalidParameterError(
            f"the JSON Schema cannot be turned into a grammar: {detail}."
        ) from None
    check_grammar_bounds(gbnf)
    return _strict_strings(gbnf)


# llama-cpp-python's converter lets a JSON string hold any character but a quote and a backslash:
# raw line breaks and control characters too, which JSON forbids (json.loads, jq refuse them), and
# a frame's "\nUser:" could be written inside one. llama.cpp's own converter (and JSON_GBNF below)
# leaves them out; so does the rule put in its place.
_LOOSE_CHAR = r'char ::= [^"\\] |'
_STRICT_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] |'


def _strict_strings(gbnf: str) -> str:
    """``gbnf`` with its string characters as JSON allows them (no raw control characters)."""
    return "\n".join(
        _STRICT_CHAR + line[len(_LOOSE_CHAR) :] if line.startswith(_LOOSE_CHAR) else line
        for line in gbnf.split("\n")
    )


@functools.lru_cache(maxsize=1)
def _json_gbnf() -> str:
    from llama_cpp.llama_grammar import JSON_GBNF

    # llama.cpp's json.gbnf: an object at the top, any JSON inside.
    return JSON_GBNF
