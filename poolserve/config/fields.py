"""A setting declared once: a config dataclass's field that carries its command-line flag.

`setting(default, help=..., minimum=... | choices=...)` is a dataclass field whose metadata says
what values it takes. From that one declaration come the flag (`--max-batch-tokens`, named after
the field, with its `POOLSERVE_*` variable and its value parser: `add_flags`), the copies from
the parsed flags into the dataclass and back (`flag_values`, `setting_values`), and the check of
a value given in Python (`check_settings`), so the CLI, a model file, Ray's config and the
Python API refuse the same values with the same words (vLLM's `EngineArgs` generates its flags
from its fields the same way).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import MISSING, dataclass
from typing import Any, Literal

from poolserve.config.values import (
    env_default,
    integer,
    integer_or_off,
    non_negative_seconds,
    one_of,
    positive_seconds,
)
from poolserve.errors import SettingError

_FLAG = "poolserve.flag"
# A flag whose command-line default is the dataclass's.
_SAME: Any = object()


@dataclass(frozen=True)
class Flag:
    """What a setting's flag takes: an integer from `minimum` (to `maximum`; with `off`: or
    `off`, None), a number of `seconds` (above 0, or 0 and up), one of `choices`, or (none of
    these) any text."""

    help: str
    minimum: int | None = None
    maximum: int | None = None
    off: bool = False
    seconds: Literal["positive", "non_negative"] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    # The command line's default where it is not the dataclass's (`--compile`: auto on the
    # command line, off in Python, where compiling at start-up would surprise).
    cli_default: Any = _SAME

    def parser(self) -> Callable[[str], Any]:
        if self.choices is not None:
            return one_of(self.choices)
        if self.seconds is not None:
            return positive_seconds if self.seconds == "positive" else non_negative_seconds
        if self.minimum is not None:
            if self.off:
                return integer_or_off(self.minimum)
            return integer(self.minimum, self.maximum)
        return str

    def check(self, flag: str, value: Any) -> None:
        """Refuse a value given in Python that the flag would refuse (None: the default)."""
        if value is None:
            return
        if self.choices is not None and value not in self.choices:
            *others, last = self.choices
            either = f"{', '.join(others)} or {last}" if others else last
            raise SettingError(f"{flag} must be {either}, got {value!r}")
        if self.seconds is not None:
            above = value > 0 if self.seconds == "positive" else value >= 0
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number and math.isfinite(value) and above):
                least = "more than 0" if self.seconds == "positive" else "0 or more"
                raise SettingError(f"{flag} must be a number of seconds, {least}; got {value!r}")
        if self.minimum is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise SettingError(f"{flag} must be an integer, got {value!r}")
            if value < self.minimum:
                raise SettingError(f"{flag} must be at least {self.minimum}, got {value}")
            if self.maximum is not None and value > self.maximum:
                raise SettingError(f"{flag} must be at most {self.maximum}, got {value}")


def setting(
    default: Any = MISSING,
    *,
    default_factory: Callable[[], Any] | Any = MISSING,
    help: str,
    minimum: int | None = None,
    maximum: int | None = None,
    off: bool = False,
    seconds: Literal["positive", "non_negative"] | None = None,
    choices: tuple[str, ...] | None = None,
    metavar: str | None = None,
    cli_default: Any = _SAME,
) -> Any:
    """A dataclass field with its flag (see the module's docstring)."""
    flag = Flag(help, minimum, maximum, off, seconds, choices, metavar, cli_default)
    metadata = {_FLAG: flag}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_name(field_name: str) -> str:
    """`max_batch_tokens` → `--max-batch-tokens`."""
    return "--" + field_name.replace("_", "-")


def _flagged(config_type: type) -> Iterator[tuple[dataclasses.Field[Any], Flag]]:
    for field in dataclasses.fields(config_type):
        flag = field.metadata.get(_FLAG)
        if flag is not None:
            yield field, flag


def add_flags(parser: argparse.ArgumentParser, config_type: type) -> None:
    """A flag for each of `config_type`'s settings, defaulting to its `POOLSERVE_*` variable,
    else to the setting's own default."""
    defaults = config_type()
    for field, flag in _flagged(config_type):
        name = flag_name(field.name)
        default = getattr(defaults, field.name) if flag.cli_default is _SAME else flag.cli_default
        parser.add_argument(
            name,
            dest=field.name,
            type=flag.parser(),
            choices=flag.choices,
            default=env_default(name, default),
            metavar=flag.metavar,
            help=flag.help,
        )


def flag_values(args: argparse.Namespace, config_type: type) -> dict[str, Any]:
    """`config_type`'s settings as the parsed flags give them, by field name."""
    return {field.name: getattr(args, field.name) for field, _ in _flagged(config_type)}


def setting_values(config: Any) -> dict[str, Any]:
    """A config's settings by field name (what `flag_values` would read back)."""
    return {field.name: getattr(config, field.name) for field, _ in _flagged(type(config))}


def check_settings(config: Any) -> None:
    """Refuse (SettingError, naming the flag) a setting its flag would not take."""
    for field, flag in _flagged(type(config)):
        flag.check(flag_name(field.name), getattr(config, field.name))
