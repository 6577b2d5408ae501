"""The configuration reference (the docs' Configuration page) is generated from the settings'
declarations: it lists exactly the flags each command's `--help` prints, with their variables."""

from __future__ import annotations

import argparse
import re

import pytest

from poolserve.config.grammar import build_parser
from poolserve.config.reference import reference


def help_flags(command: str) -> set[str]:
    """The flags (and arguments) `poolserve COMMAND --help` prints."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    names: set[str] = set()
    for action in commands.choices[command]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        names |= set(action.option_strings) or {str(action.metavar or action.dest.upper())}
        # A switch prints its --no- form too; the reference states it once.
        names -= {name for name in action.option_strings if name.startswith("--no-")}
    return names


def reference_flags(command: str) -> set[str]:
    section = reference().split(f"## `poolserve {command}`")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row.split(" | ")[0])}


@pytest.mark.parametrize("command", ["serve", "embed", "compile"])
def test_the_reference_lists_every_flag_help_prints(command: str) -> None:
    assert reference_flags(command) == help_flags(command)


def test_each_flag_names_its_variable() -> None:
    text = reference()
    for row in (line for line in text.splitlines() if line.startswith("| `--")):
        flag, variable = row.split(" | ")[:2]
        name = flag.strip("| `").split("`")[0]
        assert variable == f"`POOLSERVE_{name[2:].upper().replace('-', '_')}`", row
