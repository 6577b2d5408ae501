"""A setting declared once: a config dataclass's field that carries its command-line flag.

`setting(default, help=..., minimum=... | number=...)` is a dataclass field whose metadata says
how its flag reads; the rest comes from the field itself: its name names the flag
(`--max-batch-tokens`) and its `POOLSERVE_*` variable, its type says what the flag takes (a
`Literal` its choices, `bool` a `--x/--no-x` switch, a `tuple[str, ...]` several values), its
default is the flag's. From that one declaration come the flag (`add_flags`), the values read
back into the dataclass (`finish_flags`, `flag_values`), settings given by name as arguments
(`flag_arguments`: a model file's entries, Ray's config), a config's settings as the flags name
them (`setting_values`), the check of a value given in Python (`check_settings`), and the
docs' configuration reference (`declared_flags`, config/reference.py). The CLI, a model file,
Ray's config and the Python API thereby refuse the same values with the same words (vLLM's
`EngineArgs` generates its flags from its fields the same way).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass
from typing import Any, Literal

from poolserve.config.values import (
    boolean,
    env_default,
    env_lines,
    env_list,
    integer,
    integer_or_off,
    name_and_text,
    number_above,
    one_of,
    variable,
)
from poolserve.errors import SettingError

_FLAG = "poolserve.flag"
# A flag whose command-line default is the dataclass's.
_SAME: Any = object()

# How a field's type reads on the command line.
Shape = Literal["switch", "integer", "number", "choice", "text", "texts", "pairs"]


@dataclass(frozen=True)
class Flag:
    """How a setting's flag reads beyond what its field's type says: an integer from `minimum`
    (to `maximum`; with `off`: or `off`, None), a `number` (above 0, or 0 and up) of `unit`,
    `choices` where the type is not a `Literal`, and for a list: whether one flag takes several
    values (`several`) or is repeated, one value each, and whether its variable holds one value
    a line (`env_lines`) rather than a comma-separated list."""

    help: str
    minimum: int | None = None
    maximum: int | None = None
    off: bool = False
    number: Literal["positive", "non_negative"] | None = None
    unit: str = "seconds"
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    # The command line's default where it is not the dataclass's (`--compile`: auto on the
    # command line, off in Python, where compiling at start-up would surprise).
    cli_default: Any = _SAME
    # The flag's name where it is not the field's (`prompts`: `--prompt`), other names for it
    # (`-o`), and a positional argument instead of a flag.
    name: str | None = None
    aliases: tuple[str, ...] = ()
    positional: bool = False
    several: bool = False
    env_lines: bool = False


@dataclass(frozen=True)
class DeclaredFlag:
    """One flag as declared: its field, its flag metadata, and how its type reads."""

    field: dataclasses.Field[Any]
    flag: Flag
    shape: Shape
    choices: tuple[str, ...] | None

    @property
    def name(self) -> str:
        """`--max-batch-tokens` (a positional argument: its field's name)."""
        if self.flag.positional:
            return self.field.name
        return self.flag.name or flag_name(self.field.name)

    @property
    def variable(self) -> str | None:
        """The environment variable its default is read from (None: a positional argument)."""
        return None if self.flag.positional else variable(self.name)

    @property
    def default(self) -> Any:
        """The default the command line shows (the dataclass's unless it has its own)."""
        if self.flag.cli_default is not _SAME:
            return self.flag.cli_default
        if self.field.default is not MISSING:
            return self.field.default
        if self.field.default_factory is not MISSING:
            return self.field.default_factory()
        return None

    @property
    def required(self) -> bool:
        return self.field.default is MISSING and self.field.default_factory is MISSING

    def accepted(self) -> str:
        """What the flag takes, in words (the configuration reference's)."""
        flag = self.flag
        if self.shape == "switch":
            return "a boolean (the flag, or --no-...; its variable: 1/0, true/false, yes/no)"
        if self.choices is not None:
            return "one of " + ", ".join(self.choices)
        if self.shape == "number":
            if flag.number == "positive":
                return f"a number of {flag.unit} above 0"
            return f"a number of {flag.unit}, 0 or more"
        if self.shape == "integer" and flag.minimum is not None:
            upper = f" to {flag.maximum}" if flag.maximum is not None else " up"
            return f"an integer from {flag.minimum}{upper}" + (", or off" if flag.off else "")
        if self.shape == "pairs":
            return "NAME=TEXT, repeated"
        if self.shape == "texts" and flag.positional:
            return "any number of them"
        if self.shape == "texts":
            return "one or more values" if flag.several else "a value, repeated for several"
        return "text"

    def parser(self) -> Callable[[str], Any]:
        """The converter of one value given on the command line or in its variable."""
        flag = self.flag
        if self.choices is not None:
            return one_of(self.choices)
        if self.shape == "number":
            return number_above(flag.number == "positive", flag.unit)
        if self.shape == "integer":
            low = 0 if flag.minimum is None else flag.minimum
            return integer_or_off(low) if flag.off else integer(low, flag.maximum)
        if self.shape == "pairs":
            return name_and_text
        return str

    def check(self, value: Any) -> None:
        """Refuse a value given in Python that the flag would refuse (None: the default)."""
        if value is None or self.shape in ("switch", "text", "texts", "pairs"):
            return
        if self.choices is not None and value not in self.choices:
            *others, last = self.choices
            either = f"{', '.join(others)} or {last}" if others else last
            raise SettingError(f"{self.name} must be {either}, got {value!r}")
        if self.shape == "number":
            above = value > 0 if self.flag.number == "positive" else value >= 0
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number and math.isfinite(value) and above):
                least = "more than 0" if self.flag.number == "positive" else "0 or more"
                raise SettingError(
                    f"{self.name} must be a number of {self.flag.unit}, {least}; got {value!r}"
                )
        if self.shape == "integer":
            if isinstance(value, bool) or not isinstance(value, int):
                raise SettingError(f"{self.name} must be an integer, got {value!r}")
            if self.flag.minimum is not None and value < self.flag.minimum:
                raise SettingError(f"{self.name} must be at least {self.flag.minimum}, got {value}")
            if self.flag.maximum is not None and value > self.flag.maximum:
                raise SettingError(f"{self.name} must be at most {self.flag.maximum}, got {value}")


def setting(
    default: Any = MISSING,
    *,
    default_factory: Callable[[], Any] | Any = MISSING,
    help: str,
    **how: Any,
) -> Any:
    """A dataclass field with its flag (see the module's docstring; `how`: `Flag`'s fields)."""
    metadata = {_FLAG: Flag(help, **how)}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def flag_name(field_name: str) -> str:
    """`max_batch_tokens` → `--max-batch-tokens`."""
    return "--" + field_name.replace("_", "-")


def _shape(hint: Any, flag: Flag) -> tuple[Shape, tuple[str, ...] | None]:
    """How a field of type `hint` reads, and its choices (a Literal's values)."""
    options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType) and len(options) == 1:
        return _shape(options[0], flag)
    if origin is Literal:
        return "choice", tuple(str(option) for option in options)
    if hint is bool:
        return "switch", None
    if hint is int:
        return "integer", None
    if hint is float:
        return "number", None
    if origin is tuple:
        pairs = typing.get_origin(options[0]) is tuple
        return ("pairs" if pairs else "texts"), None
    if flag.choices is not None:
        return "choice", flag.choices
    return "text", None


def declared_flags(config_type: type) -> Iterator[DeclaredFlag]:
    """`config_type`'s settings, in field order."""
    hints = typing.get_type_hints(config_type)
    for field in dataclasses.fields(config_type):
        flag = field.metadata.get(_FLAG)
        if flag is not None:
            shape, choices = _shape(hints[field.name], flag)
            yield DeclaredFlag(field, flag, shape, choices or flag.choices)


def _selected(
    config_type: type, only: Sequence[str] | None, exclude: Sequence[str]
) -> list[DeclaredFlag]:
    return [
        each
        for each in declared_flags(config_type)
        if (only is None or each.field.name in only) and each.field.name not in exclude
    ]


def add_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    config_type: type,
    *,
    only: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
) -> None:
    """A flag (or positional argument) for each of `config_type`'s settings (`only` those, not
    those `exclude`d), defaulting to its `POOLSERVE_*` variable, else to the setting's own
    default. Lists and switches are read from their variables by `flag_values`."""
    for each in _selected(config_type, only, exclude):
        flag, field = each.flag, each.field
        if flag.positional:
            parser.add_argument(
                field.name,
                nargs="*" if each.shape == "texts" else None,
                metavar=flag.metavar,
                help=flag.help,
            )
            continue
        names = [each.name, *flag.aliases]
        common: dict[str, Any] = {"dest": field.name, "metavar": flag.metavar, "help": flag.help}
        if each.shape == "switch":
            action = argparse.BooleanOptionalAction
            default = env_default(each.name, each.default)
            parser.add_argument(*names, action=action, default=default, **common)
        elif each.shape in ("texts", "pairs"):
            many: dict[str, Any] = {"nargs": "+"} if flag.several else {"action": "append"}
            parser.add_argument(*names, type=each.parser(), default=None, **many, **common)
        else:
            parser.add_argument(
                *names,
                type=each.parser(),
                choices=each.choices,
                default=env_default(each.name, each.default),
                required=each.required,
                **common,
            )


def finish_flags(
    args: argparse.Namespace, config_types: Sequence[type], parser: argparse.ArgumentParser
) -> None:
    """Complete the parsed flags of `config_types` (those the parser has) in place: a list as a
    tuple (given, else its variable's, else its default), a switch read from its variable
    where it is not given. A bad variable is the parser's error."""
    for config_type in config_types:
        for each in declared_flags(config_type):
            name = each.field.name
            if hasattr(args, name):
                try:
                    setattr(args, name, _final(each, getattr(args, name)))
                except argparse.ArgumentTypeError as exc:
                    parser.error(f"argument {each.name}: {exc}")


def _final(each: DeclaredFlag, value: Any) -> Any:
    if each.shape == "switch":
        return value if value is None else boolean(value)
    if each.shape not in ("texts", "pairs"):
        return value
    if value is None and not each.flag.positional:
        read = env_lines if each.flag.env_lines else env_list
        variable = read(each.name)
        value = None if variable is None else [each.parser()(text) for text in variable]
    if value is None or (each.flag.positional and not value):
        return each.default
    return tuple(value)


def flag_values(args: argparse.Namespace, config_type: type) -> dict[str, Any]:
    """`config_type`'s settings as the finished flags give them, by field name (those the
    parser has)."""
    return {
        each.field.name: getattr(args, each.field.name)
        for each in declared_flags(config_type)
        if hasattr(args, each.field.name)
    }


def setting_keys(config_types: Sequence[type]) -> dict[str, DeclaredFlag]:
    """`config_types`' settings by the keys a file or a mapping may name them with: the field's
    name and its flag's (`prompts` and `prompt`, `api_keys` and `api_key`)."""
    keys: dict[str, DeclaredFlag] = {}
    for config_type in config_types:
        for each in declared_flags(config_type):
            keys[each.field.name] = each
            if not each.flag.positional:
                keys[each.name.removeprefix("--").replace("-", "_")] = each
    return keys


def flag_arguments(values: Mapping[str, Any], config_types: Sequence[type]) -> list[str]:
    """Settings by name (`max_batch_tokens` or `max-batch-tokens`; a field's name or its
    flag's) as command-line arguments of `config_types`' flags, to be checked by the command's
    own parser: a positional argument goes bare, a switch is its flag or `--no-` flag, a list
    follows its flag whole or repeats it, and a mapping of NAME=TEXT pairs (prompts) repeats
    it; a name no flag has is left to the parser to refuse."""
    flags = setting_keys(config_types)
    argv: list[str] = []
    for key, value in values.items():
        each = flags.get(key.replace("-", "_"))
        name = each.name if each is not None else "--" + key.replace("_", "-")
        if each is not None and each.flag.positional:
            argv += [str(item) for item in value] if isinstance(value, list | tuple) else [value]
        elif isinstance(value, bool):
            argv.append(name if value else "--no-" + name[2:])
        elif isinstance(value, Mapping):
            for pair in value.items():
                argv += [name, "=".join(map(str, pair))]
        elif isinstance(value, list | tuple) and each is not None and each.flag.several:
            argv += [name, *map(str, value)]
        elif isinstance(value, list | tuple):
            for item in value:
                argv += [name, str(item)]
        else:
            argv += [name, str(value)]
    return argv


def setting_values(config: Any) -> dict[str, Any]:
    """A config's settings by field name (what `flag_values` would read back)."""
    return {
        each.field.name: getattr(config, each.field.name) for each in declared_flags(type(config))
    }


def check_settings(config: Any) -> None:
    """Refuse (SettingError, naming the flag) a setting its flag would not take."""
    for each in declared_flags(type(config)):
        each.check(getattr(config, each.field.name))
