"""The commands: `poolserve serve`, `embed` and `compile`, each run from its parsed flags (the
grammar is config/grammar.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from poolserve.commands.compile_command import compile_command
from poolserve.commands.embed_command import embed
from poolserve.commands.serve_command import serve
from poolserve.config.grammar import parse_args

if TYPE_CHECKING:
    from poolserve.engine.model_backend import BackendFactory


def main(argv: Sequence[str] | None = None, *, backend: BackendFactory | None = None) -> int:
    """The command line; `backend` replaces the model backend (a test harness injects faults)."""
    args = parse_args(argv)
    if args.command == "serve":
        return serve(args, backend)
    if args.command == "embed":
        return embed(args)
    if args.command == "compile":
        return compile_command(args)
    return 2
