"""The configuration reference, generated from the settings declarations: for each command, every
flag (or argument) it takes, with its `POOLSERVE_*` variable, its default and what it accepts, in
the order `--help` lists them, as Markdown (the docs site's Configuration page is this)."""

from __future__ import annotations

import dataclasses
from typing import Any

from poolserve.config.command_config import ModelSources, RayConfig
from poolserve.config.fields import DeclaredFlag, declared_flags
from poolserve.config.grammar import COMMANDS, HELP, RAY_GROUP
from poolserve.config.job_config import JobInput, JobOptions
from poolserve.config.model_config import EngineConfig, ModelConfig
from poolserve.config.server_config import ServerConfig

# What each group of settings is, in the reference's words.
GROUPS: dict[type, str] = {
    ModelSources: "Which models",
    ServerConfig: "Serving over HTTP",
    ModelConfig: "What to load",
    EngineConfig: "How the engine batches and runs",
    RayConfig: RAY_GROUP,
    JobInput: "The corpus and the output",
    JobOptions: "How the job runs",
}
PREAMBLE = """# Configuration

Every setting is a flag of the commands that take it, and the `POOLSERVE_*` environment
variable named beside it (a flag wins over its variable). In Python, the same settings are the
fields of `ModelConfig`, `EngineConfig` and `ServerConfig`, refused with the same words; in a
`--config` file of models, an entry's keys are the model's own settings (the *What to load* and
*How the engine batches and runs* groups, and `served_model_name`).

This page is generated from the settings' declarations (`poolserve/config/`), so it lists
exactly the flags `poolserve serve --help`, `embed --help` and `compile --help` print.
"""


def command_flags(command: str) -> list[tuple[str, list[DeclaredFlag]]]:
    """The settings `command` takes, titled by the group that declares them, in `--help`'s
    order."""
    groups: list[tuple[str, list[DeclaredFlag]]] = []
    for config_type, which in COMMANDS[command]:
        only, exclude = which.get("only"), which.get("exclude", ())
        flags = [
            each
            for each in declared_flags(config_type)
            if (only is None or each.field.name in only) and each.field.name not in exclude
        ]
        title = "Logging" if only == ("log_level",) else GROUPS[config_type]
        groups.append((title, flags))
    return groups


def _default(each: DeclaredFlag) -> str:
    if each.required:
        return "required"
    if each.field.default_factory is not dataclasses.MISSING:
        return "the machine's (see what it does)"
    value: Any = each.default
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return ", ".join(map(str, value))
    return f"`{value}`"


def _row(each: DeclaredFlag) -> str:
    flag = each.flag
    name = f"`{each.name}`" if not flag.positional else f"`{flag.metavar or each.name.upper()}`"
    names = ", ".join([name, *(f"`{alias}`" for alias in flag.aliases)])
    variable = f"`{each.variable}`" if each.variable else "—"
    cells = [names, variable, _default(each), each.accepted(), flag.help]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def reference() -> str:
    """The whole reference page."""
    lines = [PREAMBLE]
    for command in COMMANDS:
        summary, _ = HELP[command]
        lines += [f"## `poolserve {command}`", "", summary[0].upper() + summary[1:] + ".", ""]
        for title, flags in command_flags(command):
            lines += [f"### {title}", "", "| flag | variable | default | accepts | what it does |"]
            lines += ["|---|---|---|---|---|", *map(_row, flags), ""]
    return "\n".join(lines)
