"""A body that fails its schema, said in one readable sentence per field, as every front end
answers it (HTTP's 400 and 422, gRPC's INVALID_ARGUMENT): a union's failures said once by the
field's description, an unknown field with the nearest known one."""

from __future__ import annotations

from collections.abc import Sequence
from difflib import get_close_matches
from typing import Any, Protocol

from pydantic import BaseModel

from poolserve.apis.request_bodies import IGNORED_FIELDS


class Invalid(Protocol):
    """A validation error: pydantic's, or FastAPI's for a route's parameters."""

    def errors(self) -> Sequence[Any]: ...


def validation_message(
    error: Invalid, schema: type[BaseModel] | None = None
) -> tuple[str, str | None]:
    """One readable sentence per field in error, and the first field.

    A field whose value matches no member of a union (pydantic reports each member's failure)
    is described once, by the field's description: "input must be a string, an array of
    strings, ...; got a number". An unknown field names the nearest known one.
    """
    details = [detail for detail in error.errors() if detail.get("type") != "json_invalid"]
    by_field: dict[str, list[tuple[list[str | int], Any]]] = {}
    for detail in details:
        extra = detail.get("type") == "extra_forbidden"
        location = _client_location(detail.get("loc", ()), keep_last=extra)
        field = str(location[0]) if location else ""
        unknown = extra and len(location) == 1
        by_field.setdefault(field, []).append((location, _UNKNOWN if unknown else detail))
    problems = [_problem(field, found, schema) for field, found in by_field.items()]
    first = next(iter(by_field), None) or None
    return "; ".join(dict.fromkeys(problems)) or "the request body is invalid", first


_UNKNOWN = object()


def _client_location(loc: Any, *, keep_last: bool = False) -> list[str | int]:
    """The error's path as the client wrote it: without FastAPI's "body" and without the union
    member names pydantic inserts (`str`, `list[int]`, `RerankDocument`). With `keep_last`
    (an unknown key: the client's own, whatever it looks like) the last part always stays."""
    parts: list[str | int] = []
    loc = [part for part in loc if part != "body"]
    for index, part in enumerate(loc):
        last = keep_last and index == len(loc) - 1
        if (
            not last
            and isinstance(part, str)
            and (part[:1].isupper() or part.startswith(_TYPE_TAGS))
        ):
            continue
        parts.append(part)
    return parts


_TYPE_TAGS = ("str", "list[", "int", "float", "bool", "function-", "constrained-", "literal[")


def _path(location: list[str | int]) -> str:
    """`documents[0].text`"""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _last_index(location: list[str | int]) -> int:
    return location[-1] if location and isinstance(location[-1], int) else -1


def _furthest(found: list[tuple[list[str | int], Any]]) -> tuple[list[str | int], Any]:
    """Of a union's failures, the first failure of the member that read furthest: it names
    the value at fault. For [101, 1.5, 102], the token ids' member first fails at input[1]; the
    strings' member fails at every item, first at input[0]."""
    by_member: dict[str, list[tuple[list[str | int], Any]]] = {}
    for location, detail in found:
        tags = [
            part
            for part in detail.get("loc", ())
            if isinstance(part, str) and (part[:1].isupper() or part.startswith(_TYPE_TAGS))
        ]
        by_member.setdefault(tags[0] if tags else "", []).append((location, detail))
    firsts = [
        min(failures, key=lambda item: (_last_index(item[0]), len(item[0])))
        for failures in by_member.values()
    ]
    return max(firsts, key=lambda item: (len(item[0]), _last_index(item[0])))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float) and not value.is_integer():
        return f"{value}, not a whole number"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _problem(
    field: str, found: list[tuple[list[str | int], Any]], schema: type[BaseModel] | None
) -> str:
    known = sorted(
        (schema.model_fields if schema is not None else {}),
        key=lambda name: name in IGNORED_FIELDS or name in ("request_timeout", "priority"),
    )
    if found[0][1] is _UNKNOWN:
        # The first few, each by a bounded prefix: a body may send thousands of long keys.
        every = sorted({_path(location) for location, _ in found})
        unknown = [name if len(name) <= 64 else f"{name[:64]}..." for name in every[:5]]
        near = [get_close_matches(str(name).split(".")[-1], known, n=1) for name in unknown]
        hints = [f"; did you mean `{match[0]}`?" if match else "" for match in near]
        own = [name for name in known if name not in IGNORED_FIELDS]
        listed = f" (this route takes: {', '.join(own)})" if own else ""
        more = f"; and {len(every) - 5} more unknown fields" if len(every) > 5 else ""
        return (
            "; ".join(
                f"unknown field `{name}`{hint}" for name, hint in zip(unknown, hints, strict=True)
            )
            + more
            + listed
        )
    field_info = schema.model_fields.get(field) if schema is not None else None
    described = field_info.description if field_info is not None else None
    if len(found) > 1 and described:
        # A union: every member failed. Say what the field takes, and what it got where (the
        # deepest value a member looked at, so `[1, 2]` for strings names its first number).
        kinds = {item[1].get("type"): item for item in found}
        if "extra_forbidden" in kinds:
            return f"{field} must be {described}; {_path(kinds['extra_forbidden'][0])} is unknown"
        present = [item for item in found if item[1].get("type") != "missing"] or found
        location, detail = _furthest(present)
        where = _path(location) or field
        return f"{field} must be {described}; {where} is {_json_type(detail.get('input'))}"
    problems = []
    for location, detail in found:
        message = str(detail.get("msg", "is invalid")).removeprefix("Value error, ")
        if detail.get("type") == "extra_forbidden":
            message = "unknown field"
        where = _path(location)
        if detail.get("type") == "too_short" and detail.get("input") == [] and where:
            problems.append(f"{where} is an empty array; send at least one item")
            continue
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(dict.fromkeys(problems))
