"""A batch's input file: OpenAI's request lines, `{"custom_id", "method": "POST", "url",
"body"}`, one JSON object a line (blank lines are skipped).

`check_input` reads the whole file before any line runs (the batch's `validating` status): a
line that is not a JSON object, without a string `custom_id`, with another method, a `url`
other than the batch's endpoint or a `body` that is not an object, and a `custom_id` used twice,
each fail the batch, named by line number (OpenAI's `errors.data[].line`, counted from 1).
`pending_lines` then gives the runner the lines not yet done, numbered from 0 among the
request lines, a slice at a time. Both run in a thread.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

# The errors one failed validation lists (their count is in the last one's message).
MAX_ERRORS = 100


@dataclass(frozen=True)
class LineError:
    """OpenAI's batch error object."""

    code: str
    message: str
    line: int | None = None
    param: str | None = None

    def wire(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}


@dataclass(frozen=True)
class RequestLine:
    """A request of the batch: its place among the request lines, its id and its body."""

    index: int
    custom_id: str
    body: bytes
    # Whether the body names its own `priority` (else it runs in the lowest lane).
    own_priority: bool


def _request_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, the line) for each line that is not blank."""
    with open(path, "rb") as file:
        for number, line in enumerate(file, 1):
            if line.strip():
                yield number, line


def _checked(number: int, line: bytes, endpoint: str) -> tuple[str, dict[str, Any]] | LineError:
    """The line's custom_id and body, or why it cannot run."""
    try:
        request = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return LineError("invalid_json_line", f"line {number} is not valid JSON: {exc}", number)
    if not isinstance(request, dict):
        return LineError("invalid_request", f"line {number} is not a JSON object", number)
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return LineError(
            "missing_required_parameter",
            f"line {number} has no custom_id (a string that names the request in the output)",
            number,
            "custom_id",
        )
    unknown = sorted(set(request) - {"custom_id", "method", "url", "body"})
    if unknown:
        return LineError(
            "invalid_request",
            f"line {number} has unknown fields {unknown}; a request line has custom_id, method, "
            "url and body",
            number,
            unknown[0],
        )
    if request.get("method") != "POST":
        return LineError("invalid_method", f"line {number}: method must be POST", number, "method")
    if request.get("url") != endpoint:
        return LineError(
            "mismatched_url",
            f"line {number}: url {str(request.get('url'))[:100]!r} is not the batch's endpoint "
            f"{endpoint}; a batch sends every line to its one endpoint",
            number,
            "url",
        )
    body = request.get("body")
    if not isinstance(body, dict):
        message = f"line {number}: body must be an object"
        return LineError("invalid_request", message, number, "body")
    return custom_id, body


def check_input(path: Path, endpoint: str) -> tuple[int, list[LineError]]:
    """The request lines' count, and the errors that fail the batch (none: it can run)."""
    errors: list[LineError] = []
    seen: dict[str, int] = {}
    count = 0
    for number, line in _request_lines(path):
        count += 1
        checked = _checked(number, line, endpoint)
        if isinstance(checked, LineError):
            errors.append(checked)
            continue
        custom_id = checked[0]
        if custom_id in seen:
            errors.append(
                LineError(
                    "duplicate_custom_id",
                    f"line {number} uses the custom_id {custom_id[:100]!r} of line "
                    f"{seen[custom_id]}; each request's custom_id must be its own",
                    number,
                    "custom_id",
                )
            )
        else:
            seen[custom_id] = number
    if not count:
        errors.append(LineError("empty_file", "the input file has no request lines"))
    if len(errors) > MAX_ERRORS:
        more = len(errors) - MAX_ERRORS + 1
        errors = errors[: MAX_ERRORS - 1]
        errors.append(LineError("too_many_errors", f"{more} more lines have errors"))
    return count, errors


def pending_lines(path: Path, endpoint: str, done: set[int]) -> Iterator[RequestLine]:
    """The request lines not in `done`, in order, read as they are asked for (the file was
    checked by `check_input`; advance it in a thread, a slice at a time: `take`)."""
    for index, (number, line) in enumerate(_request_lines(path)):
        if index in done:
            continue
        checked = _checked(number, line, endpoint)
        assert not isinstance(checked, LineError), "pending_lines reads a checked file"
        custom_id, body = checked
        yield RequestLine(index, custom_id, orjson.dumps(body), "priority" in body)


def take(lines: Iterator[RequestLine], count: int) -> list[RequestLine]:
    """The next `count` lines (fewer at the end)."""
    return list(itertools.islice(lines, count))
