"""The commands' grammar: `poolserve serve`, `embed` and `compile`, each put together from the
settings dataclasses whose fields declare their flags (`fields.py`): every flag also read from its
`POOLSERVE_*` variable, parsed and checked into those dataclasses. The command line, model files
(`model_file.py`) and Ray Serve's config (`ray/replica.py`) all read settings through it;
`parse_args(raising=True)` raises SettingError instead of exiting."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from poolserve._version import __version__
from poolserve.config.command_config import ModelSources, RayConfig
from poolserve.config.fields import add_flags, finish_flags, flag_values, setting_values
from poolserve.config.job_config import JobInput, JobOptions
from poolserve.config.model_config import EngineConfig, ModelConfig
from poolserve.config.server_config import ServerConfig
from poolserve.config.values import Parser, RaisingParser, env_default
from poolserve.errors import SettingError

DESCRIPTION = (
    "A serving engine for pooling models: serve them over HTTP, embed a corpus, compile them "
    "ahead of time. Every flag can also be set with its POOLSERVE_* environment variable."
)
EMBED_DESCRIPTION = """Embed a corpus into a file, resumably.

INPUT is JSONL (one object per line), CSV (with a header), Parquet, or plain text (one document
per line), told by its extension or --format; - reads standard input. Each record's text is its
--text-field; its id is its --id-field, else its `id` field where it has one, else its number
in the input (0, 1, ...).

OUTPUT is by its extension: a .parquet directory of parts (columns id, embedding as a
fixed-size list of float32, tokens), or one .npy matrix (with the ids beside it: vectors.npy ->
vectors.ids.jsonl), or .jsonl lines of {id, embedding, tokens}. Rows keep the input's order.

Killed at any point (even with SIGKILL), the same command continues where it stopped, and the
output holds every record exactly once. A finished output is never overwritten without
--overwrite. A record that cannot be embedded (no text field, not text, blank, too long without
--truncate) is written to OUTPUT.errors.jsonl with its line (or row) and reason, or stops the
job with --on-error fail. A progress bar shows the rate and time left on a terminal; otherwise a
log line every 10 seconds.
"""
RAY_GROUP = "Ray (pip install 'poolserve[ray]')"
# Each command's settings, in the order its help lists them; the model's own `--model` is
# `embed`'s, the others name their models as MODEL arguments (or in --config).
COMMANDS: dict[str, tuple[tuple[type, dict[str, Any]], ...]] = {
    "serve": (
        (ModelSources, {}),
        (ServerConfig, {}),
        (ModelConfig, {"exclude": ("model",)}),
        (EngineConfig, {}),
        (RayConfig, {}),
    ),
    "embed": (
        (JobInput, {}),
        (JobOptions, {}),
        (ServerConfig, {"only": ("log_level",)}),
        (ModelConfig, {}),
        (EngineConfig, {}),
        (RayConfig, {}),
    ),
    "compile": (
        (ModelSources, {}),
        (ServerConfig, {"only": ("log_level",)}),
        (ModelConfig, {"exclude": ("model",)}),
        (EngineConfig, {}),
    ),
}
HELP = {
    "serve": (
        "serve a model over HTTP",
        "Serve a model over HTTP. Every flag can also be set with its POOLSERVE_* environment "
        "variable (--max-batch-size: POOLSERVE_MAX_BATCH_SIZE); a flag wins.",
    ),
    "embed": ("embed a corpus file into Parquet, .npy or .jsonl (resumable)", EMBED_DESCRIPTION),
    "compile": (
        "compile models ahead of time into the cache, so that serving starts in seconds",
        "Compile each model's forward ahead of time into POOLSERVE_CACHE_DIR (default "
        "~/.cache/poolserve) for the thread counts `serve` runs it at with the same flags on "
        "this machine; a later `serve` (or `embed`) loads it instead of compiling. Run it where "
        "the server will run (the cache is keyed by the CPU's instruction set).",
    ),
}


class _DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's default after its help, unless the help already says what it is (once is
    enough) or there is none to show (a None default: the help says what happens then)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS, False, ()):
            return text
        return super()._get_help_string(action)


class _EmbedHelpFormatter(argparse.RawDescriptionHelpFormatter, _DefaultsHelpFormatter):
    """The description as written (paragraphs), the flags with their defaults."""


def build_parser(*, raising: bool = False) -> Parser:
    """The commands' parser; `raising`: a bad flag raises SettingError instead of exiting."""
    kind = RaisingParser if raising else Parser
    parser = kind(prog="poolserve", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"poolserve {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=kind)
    for command, settings in COMMANDS.items():
        summary, description = HELP[command]
        formatter = _EmbedHelpFormatter if command == "embed" else _DefaultsHelpFormatter
        subparser = commands.add_parser(
            command, help=summary, description=description, formatter_class=formatter
        )
        parser.commands[command] = subparser
        for config_type, which in settings:
            into = subparser.add_argument_group(RAY_GROUP) if config_type is RayConfig else None
            add_flags(into or subparser, config_type, **which)
    return parser


def command_settings(command: str) -> tuple[type, ...]:
    """The settings dataclasses `command` takes flags of."""
    return tuple(config_type for config_type, _ in COMMANDS[command])


def parse_args(argv: Sequence[str] | None = None, *, raising: bool = False) -> argparse.Namespace:
    """The command line, every value checked (variables included); `raising`: a bad one raises
    SettingError (its message the command line's) instead of exiting."""
    parser = build_parser(raising=raising)
    args = parser.parse_args(argv)
    # A bad value (a variable's too) is the command's: "(see poolserve serve --help)".
    parser = parser.commands[args.command]
    finish_flags(args, command_settings(args.command), parser)
    try:
        if hasattr(args, "ray"):
            vars(args).update(setting_values(RayConfig(**flag_values(args, RayConfig)).checked()))
        if hasattr(args, "models"):
            _check_models(args)
        if args.command == "serve":  # the limits that need no model; the app checks the rest
            configs_from_args(args)[2].check_limits()
    except SettingError as exc:
        parser.error(exc.cli_message)
    return args


def _check_models(args: argparse.Namespace) -> None:
    """The models come from one place: the MODEL arguments (or POOLSERVE_MODEL), or --config;
    `args.model` is the first (or only) one."""
    if not args.models and args.config is None:
        args.models = (env_default("--model", None),)
    served_model_name = getattr(args, "served_model_name", None)
    if args.config is not None:
        given = [
            flag
            for flag, value in (
                ("MODEL", args.models),
                ("--served-model-name", served_model_name),
                ("--prompt", args.prompts),
            )
            if value
        ]
        if given:
            raise SettingError(f"{given[0]} and --config: with --config, the file names each model")
    elif len(args.models) > 1 and served_model_name:
        raise SettingError(
            "--served-model-name names one model; with several, name them in --config"
        )
    elif len(args.models) > 1 and args.prompts:
        raise SettingError("--prompt applies to one model; with several, give prompts in --config")
    if getattr(args, "ray", False) and (args.config is not None or len(args.models) > 1):
        raise SettingError("--ray serves one model; serve several as separate Ray applications")
    args.model = args.models[0] if args.models else None


def configs_from_args(args: argparse.Namespace) -> tuple[ModelConfig, EngineConfig, ServerConfig]:
    """What `serve` loads and how it serves, from its parsed flags."""
    model, engine = model_engine_configs(args)
    return model, engine, ServerConfig(**flag_values(args, ServerConfig))


def model_engine_configs(args: argparse.Namespace) -> tuple[ModelConfig, EngineConfig]:
    """What to load and how to run it: the flags `serve`, `embed`, `compile` and a model
    file's entries share (`args.model`: the model, however the command named it)."""
    model = ModelConfig(**{**flag_values(args, ModelConfig), "model": args.model})
    return model, EngineConfig(**flag_values(args, EngineConfig))
