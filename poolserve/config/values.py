"""Flag values: range checks, and defaults read from `POOLSERVE_*` environment variables.

A variable's value becomes the flag's default as a string (`EnvValue`). argparse converts a
string default only when the flag is not given, so a flag always wins over a bad variable, and
`--version` or `--help` never read one. Each converter checks the range and says, in one line,
what is accepted and where the bad value came from (the flag, or the variable).
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from poolserve.errors import SettingError

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


class EnvValue(str):
    """A flag's default as read from its environment variable."""

    variable: str

    def __new__(cls, value: str, variable: str) -> EnvValue:
        text = super().__new__(cls, value)
        text.variable = variable
        return text


def variable(flag: str) -> str:
    """`--max-batch-size` → `POOLSERVE_MAX_BATCH_SIZE`."""
    return "POOLSERVE_" + flag.removeprefix("--").upper().replace("-", "_")


def env_default(flag: str, default: Any) -> Any:
    """The flag's default: its variable's value if set (converted later, by the flag's type)."""
    name = variable(flag)
    value = os.environ.get(name)
    return default if value is None else EnvValue(value, name)


def env_list(flag: str) -> tuple[str, ...] | None:
    """A list-valued flag's default from its variable (comma- or space-separated)."""
    value = os.environ.get(variable(flag))
    if value is None:
        return None
    return tuple(part for part in value.replace(",", " ").split() if part)


def _refuse(text: str, accepted: str) -> argparse.ArgumentTypeError:
    source = f"{text.variable}={text!r}" if isinstance(text, EnvValue) else repr(text)
    return argparse.ArgumentTypeError(f"{source} is not {accepted}")


def integer(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer from `low` (to `high`)."""
    accepted = f"an integer from {low}" + (f" to {high}" if high is not None else " up")

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise _refuse(text, accepted) from None
        if value < low or (high is not None and value > high):
            raise _refuse(text, accepted)
        return value

    return convert


def integer_or_off(low: int) -> Callable[[str], int | None]:
    """An integer from `low` up, or `off` (None)."""
    as_integer = integer(low)

    def convert(text: str) -> int | None:
        if str(text).strip().lower() == "off":
            return None
        try:
            return as_integer(text)
        except argparse.ArgumentTypeError:
            raise _refuse(text, f"an integer from {low} up, or off") from None

    return convert


def number_above(positive: bool, unit: str = "seconds") -> Callable[[str], float]:
    """A finite number of `unit` above 0 (`positive`), else 0 or more."""
    accepted = f"a number of {unit} above 0" if positive else f"a number of {unit}, 0 or more"

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _refuse(text, accepted) from None
        if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
            raise _refuse(text, accepted)
        return value

    return convert


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    """One of `choices` (any case)."""

    def convert(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise _refuse(text, "one of " + ", ".join(choices))
        return value

    return convert


def boolean(value: bool | str) -> bool:
    """A boolean flag's value: as given, or its variable's text (1/0, true/false, yes/no,
    on/off)."""
    if isinstance(value, bool):
        return value
    text = value.strip().lower()
    if text in TRUE or text in FALSE:
        return text in TRUE
    raise _refuse(value, "a boolean (1/0, true/false, yes/no, on/off)")


class Parser(argparse.ArgumentParser):
    """argparse, with errors in one line (the usage is one `--help` away); `raising`: raised
    as SettingError (for a caller that is not a command line) instead of exiting."""

    def __init__(self, *args: Any, raising: bool = False, **kwargs: Any) -> None:
        # `--max-batch-token 100` must not silently set another flag: no abbreviations.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.raising = raising
        # Its commands' parsers, by name (an error about a command's flag points at its help).
        self.commands: dict[str, Parser] = {}

    def error(self, message: str) -> Any:
        if self.raising:
            raise SettingError(message)
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class RaisingParser(Parser):
    """A `Parser` that raises (the class of a raising parser's subcommands)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, raising=True, **kwargs)


def name_and_text(text: str) -> tuple[str, str]:
    """`NAME=TEXT` (a prompt): the name before the first `=`, the text after it, kept whole."""
    name, equals, value = text.partition("=")
    if not equals or not name.strip():
        raise _refuse(text, "NAME=TEXT (a prompt's name, =, its text)")
    return name.strip(), value


def env_lines(flag: str) -> list[str] | None:
    """A repeatable flag's values from its variable, one per line (the values may hold spaces
    and commas)."""
    value = os.environ.get(variable(flag))
    if value is None:
        return None
    return [EnvValue(line, variable(flag)) for line in value.splitlines() if line.strip()]


def unknown_setting(
    keys: Iterable[str], known: Collection[str], noun: str = "setting"
) -> str | None:
    """The first of `keys` (by name, `-` or `_`) that is not `known`, said with the nearest
    known one; None when all are known."""
    for key in keys:
        name = key.replace("-", "_")
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            return f"unknown {noun} `{key}`" + (f"; did you mean `{near[0]}`?" if near else "")
    return None
