"""Structured output: a step's answer parsed as JSON and validated against a schema.

The schema is a pydantic model (or any type pydantic can validate, e.g. ``list[int]``) or a
JSON-schema dict. It is sent as OpenAI ``response_format`` with every request, so the
daemon's engines (embedded and SGLang) constrain decoding to it and can only write JSON of
that shape. What a grammar cannot promise is still checked here: a value cut off by
``max_tokens``, a validator the JSON schema does not express, a remote server that ignores
``response_format``. A lenient parser reads the answer and, when it does not validate, a
bounded re-ask shows the model its validation error.

The parser accepts what models really write: JSON wrapped in prose or a ``json`` code
fence, a Python literal (``{'a': True}``) from a code model, and an answer cut off at a stop
string or max_tokens (open strings and brackets are closed, then the schema decides).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

__all__ = ["Invalid", "Schema", "close_partial", "parse_answer", "strict_schema"]

_FENCE = re.compile(r"```(?:json|python|py)?\s*\n(.*?)(?:```|$)", re.DOTALL)


class Invalid(ValueError):
    """The answer could not be parsed or did not validate; the message is shown to the model."""


@dataclass(frozen=True)
class Schema:
    json_schema: dict[str, Any]
    name: str
    adapter: TypeAdapter | None = None
    """Validates and builds typed values (pydantic types); None for a plain JSON schema."""

    @classmethod
    def of(cls, spec: Any) -> Schema:
        if isinstance(spec, dict):
            import jsonschema

            jsonschema.validators.validator_for(spec).check_schema(spec)
            return cls(spec, str(spec.get("title") or "answer"))
        adapter = TypeAdapter(spec)
        name = spec.__name__ if isinstance(spec, type) else "answer"
        return cls(adapter.json_schema(), name, adapter)

    def response_format(self) -> dict[str, Any]:
        """OpenAI's strict ``json_schema`` format: objects take no keys besides their
        properties (a pydantic model's schema leaves that open, and a model under a grammar
        then invents keys)."""
        name = re.sub(r"[^A-Za-z0-9_-]", "_", self.name)[:64] or "answer"
        return {
            "type": "json_schema",
            "json_schema": {
                "name": name,
                "schema": strict_schema(self.json_schema),
                "strict": True,
            },
        }

    def instruction(self) -> str:
        schema = json.dumps(self.json_schema, separators=(",", ":"))
        return f"Answer with JSON only, no prose, matching this JSON schema:\n{schema}"

    def validate(self, value: Any) -> Any:
        """The typed value (pydantic) or the JSON value itself; raises Invalid."""
        if self.adapter is not None:
            try:
                return self.adapter.validate_python(value)
            except ValidationError as err:
                raise Invalid(_pydantic_message(err)) from None
        import jsonschema

        validator = jsonschema.validators.validator_for(self.json_schema)(self.json_schema)
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
        if errors:
            raise Invalid("; ".join(_jsonschema_message(e) for e in errors[:5]))
        return value

    def check(self, text: str) -> Any:
        """Parse and validate a raw answer; raises Invalid with a message for the model."""
        return self.validate(parse_answer(text))

    def dump(self, value: Any) -> Any:
        """JSON data for the run log."""
        if self.adapter is not None:
            return self.adapter.dump_python(value, mode="json")
        return value


def _pydantic_message(err: ValidationError) -> str:
    parts = []
    for e in err.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in e["loc"]) or "the answer"
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


def _jsonschema_message(err: Any) -> str:
    where = ".".join(str(p) for p in err.absolute_path) or "the answer"
    return f"{where}: {err.message}"


def strict_schema(schema: Any) -> Any:
    """`schema` with ``additionalProperties: false`` on every object schema that does not
    say otherwise (what OpenAI's strict mode asks of a schema)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):  # name -> schema
            out[key] = {name: strict_schema(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [strict_schema(sub) for sub in value]
        elif key in _SCHEMA_VALUES:
            out[key] = strict_schema(value)
        else:  # enum, const, default, required, ...: data, not schemas
            out[key] = value
    if "properties" in out and out.get("type", "object") == "object":
        out.setdefault("additionalProperties", False)
    return out


_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
_SCHEMA_LISTS = frozenset({"anyOf", "allOf", "oneOf", "prefixItems"})
_SCHEMA_VALUES = frozenset({"items", "additionalProperties", "not", "if", "then", "else"})


def parse_answer(text: str) -> Any:
    """The JSON value in a model's answer."""
    first_error = ""
    for body in _bodies(text):
        try:
            return _parse_one(body)
        except ValueError as err:
            first_error = first_error or str(err)
    raise Invalid(f"the answer is not valid JSON ({first_error or 'it is empty'})")


def _bodies(text: str) -> list[str]:
    fenced = [m.group(1) for m in _FENCE.finditer(text)]
    return [b for b in (*fenced, text.strip()) if b.strip()]


def _parse_one(text: str) -> Any:
    try:
        return json.loads(text, strict=False)
    except ValueError as err:
        error = err
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start >= 0:
        body = text[start:]
        try:  # a whole value followed by prose
            return json.JSONDecoder(strict=False).raw_decode(body)[0]
        except ValueError:
            pass
        try:  # a Python literal from a code model
            value = ast.literal_eval(_literal_prefix(body))
            json.dumps(value)
            return value
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
        try:  # cut off at a stop string or max_tokens
            return json.loads(close_partial(body), strict=False)
        except ValueError:
            pass
    raise ValueError(str(error).split(":")[0] if ":" in str(error) else str(error))


def _literal_prefix(text: str) -> str:
    """The first balanced bracketed expression of `text` (what a Python literal spans)."""
    depth, quote, escape = 0, "", False
    for i, ch in enumerate(text):
        if quote:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
            if depth == 0:
                return text[: i + 1]
    return text


def close_partial(text: str) -> str:
    """Complete a JSON document that was cut off: close an open string, drop a dangling
    comma, give a dangling key a null value, and close open arrays and objects."""
    stack: list[str] = []
    in_string = escape = False
    for ch in text:
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    out = text
    if in_string:
        out = (out[:-1] if escape else out) + '"'
    out = out.rstrip()
    if out.endswith(","):
        out = out[:-1]
    if out.endswith(":"):
        out += " null"
    return out + "".join(reversed(stack))
