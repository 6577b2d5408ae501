"""The commands' flag grammar: `poolserve serve`, `embed` and `compile`, every flag also read
from its `POOLSERVE_*` environment variable, parsed and checked into the settings dataclasses.
The command line, model files (`model_file.py`) and Ray Serve's config (`ray/replica.py`) all
read settings through it; `parse_args(raising=True)` raises SettingError instead of exiting."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from poolserve._version import __version__
from poolserve.config import LOG_LEVELS, EngineConfig, ModelConfig, ServerConfig
from poolserve.config.fields import add_flags, flag_values
from poolserve.config.model_flags import add_engine_flags, add_model_flags, model_engine_configs
from poolserve.config.values import (
    Parser,
    RaisingParser,
    boolean,
    env_default,
    env_lines,
    env_list,
    integer,
    name_and_text,
    one_of,
    positive_number,
)
from poolserve.errors import SettingError

DESCRIPTION = (
    "A serving engine for pooling models: serve them over HTTP, embed a corpus, compile them "
    "ahead of time. Every flag can also be set with its POOLSERVE_* environment variable."
)

# Flags whose value is a boolean (their variables are read as text, then checked).
BOOLEAN_FLAGS = ("protect_metrics", "access_log", "ray", "trust_remote_code")
# Flags that mean something only with --ray.
RAY_ONLY_FLAGS = ("replicas", "replica_cpus", "ray_address")
# Flags that take several values at once (`--served-model-name a b`); other lists repeat.
NARGS_FLAGS = ("served_model_name",)


def build_parser(*, raising: bool = False) -> argparse.ArgumentParser:
    """The commands' parser; `raising`: a bad flag raises SettingError instead of exiting."""
    kind = RaisingParser if raising else Parser
    parser = kind(prog="poolserve", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"poolserve {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=kind)

    serve = commands.add_parser(
        "serve",
        help="serve a model over HTTP",
        description="Serve a model over HTTP. Every flag can also be set with its POOLSERVE_* "
        "environment variable (--max-batch-size: POOLSERVE_MAX_BATCH_SIZE); a flag wins.",
        formatter_class=_DefaultsHelpFormatter,
    )
    serve.add_argument(
        "models",
        nargs="*",
        metavar="MODEL",
        help="local model directories or hub ids, served side by side (default: "
        "POOLSERVE_MODEL, else the bundled all-MiniLM-L6-v2)",
    )
    serve.add_argument(
        "--config",
        type=str,
        default=env_default("--config", None),
        help="a TOML, YAML or JSON file listing the models to serve, each with its own "
        "settings (README, 'Several models'); the flags are the defaults of every entry",
    )
    add_flags(serve, ServerConfig)
    serve.add_argument(
        "--served-model-name",
        nargs="+",
        default=env_list("--served-model-name"),
        help="names clients may pass as `model` (the first is used in responses); one model "
        "only (with several, name them in --config)",
    )
    serve.add_argument(
        "--allowed-origins",
        action="append",
        default=None,
        help="origins whose browser pages may call the API (CORS), e.g. https://app.example; "
        "repeat for several, * for any (POOLSERVE_ALLOWED_ORIGINS: comma-separated; "
        "default: none)",
    )
    serve.add_argument(
        "--allowed-media-domains",
        nargs="+",
        default=env_list("--allowed-media-domains"),
        metavar="HOST",
        help="fetch image URLs (http and https) from these hosts only, e.g. images.example.com "
        "or .example.com for its subdomains; private and loopback addresses only when named "
        "(POOLSERVE_ALLOWED_MEDIA_DOMAINS: comma-separated; default: no URL is fetched)",
    )
    serve.add_argument(
        "--api-key",
        action="append",
        default=None,
        help="require `Authorization: Bearer KEY` on the API routes; repeat for several keys "
        "(POOLSERVE_API_KEY: comma-separated)",
    )
    serve.add_argument(
        "--protect-metrics",
        action=argparse.BooleanOptionalAction,
        default=env_default("--protect-metrics", False),
        help="require the API key on /metrics too",
    )
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=env_default("--access-log", False),
        help="log one line per request (uvicorn's access log)",
    )
    add_model_flags(serve)
    add_engine_flags(serve)
    _add_ray_flags(serve, "serve the app as a Ray Serve application of --replicas engines")
    _add_embed_command(commands)
    _add_compile_command(commands)
    return parser


EMBED_DESCRIPTION = """Embed a corpus into a file, resumably.

INPUT is JSONL (one object per line), CSV (with a header), Parquet, or plain text (one document
per line), told by its extension or --format; - reads standard input. Each record's text is its
--text-field; its id is its --id-field, or its number in the input (0, 1, ...).

OUTPUT is by its extension: a .parquet directory of parts (columns id, embedding as a
fixed-size list of float32, tokens), or one .npy matrix (with the ids beside it in
OUTPUT.ids.jsonl), or .jsonl lines of {id, embedding, tokens}. Rows keep the input's order.

Killed at any point (even with SIGKILL), the same command continues where it stopped, and the
output holds every record exactly once. A finished output is never overwritten without
--overwrite. A record that cannot be embedded (no text field, not text, blank, too long without
--truncate) is written to OUTPUT.errors.jsonl with its line (or row) and reason, or stops the
job with --on-error fail. A progress bar shows the rate and time left on a terminal; otherwise a
log line every 10 seconds.
"""


def _add_command_flags(parser: argparse.ArgumentParser) -> None:
    """What a command that loads models without serving them takes: the log level and the
    model and engine flags `serve` has."""
    parser.add_argument(
        "--log-level",
        type=one_of(LOG_LEVELS),
        default=env_default("--log-level", "info"),
        help="how much to log",
    )
    add_model_flags(parser)
    add_engine_flags(parser)


def _add_compile_command(commands: Any) -> None:
    compile_command = commands.add_parser(
        "compile",
        help="compile models ahead of time into the cache, so that serving starts in seconds",
        description="Compile each model's forward ahead of time into POOLSERVE_CACHE_DIR "
        "(default ~/.cache/poolserve) for the thread counts `serve` runs it at with the same "
        "flags on this machine; a later `serve` (or `embed`) loads it instead of compiling. "
        "Run it where the server will run (the cache is keyed by the CPU's instruction set).",
        formatter_class=_DefaultsHelpFormatter,
    )
    compile_command.add_argument(
        "models",
        nargs="*",
        metavar="MODEL",
        help="local model directories or hub ids (default: POOLSERVE_MODEL, else the bundled "
        "all-MiniLM-L6-v2)",
    )
    compile_command.add_argument(
        "--config",
        default=env_default("--config", None),
        help="the model file `serve --config` reads; compiles each of its models",
    )
    _add_command_flags(compile_command)
    compile_command.set_defaults(
        ray=False, served_model_name=None, replicas=None, replica_cpus=None, ray_address=None
    )


def _add_embed_command(commands: Any) -> None:
    embed = commands.add_parser(
        "embed",
        help="embed a corpus file into Parquet, .npy or .jsonl (resumable)",
        description=EMBED_DESCRIPTION,
        formatter_class=_EmbedHelpFormatter,
    )
    embed.add_argument(
        "input",
        help="the corpus file, - for standard input, or a folder of images (an image-text "
        "model: each image file under it, its id its path there)",
    )
    embed.add_argument("--output", "-o", required=True, help="where the embeddings go")
    embed.add_argument(
        "--model", default=env_default("--model", None), help="default: the bundled model"
    )
    embed.add_argument(
        "--format",
        type=one_of(("jsonl", "csv", "parquet", "text")),
        default=None,
        help="the input's format (default: from its extension)",
    )
    embed.add_argument("--text-field", default="text", help="the field or column of the text")
    embed.add_argument(
        "--image-field",
        default=None,
        help="embed images (an image-text model): the field or column of each image's path, "
        "relative to the input file's folder (a folder as the input: its image files)",
    )
    embed.add_argument(
        "--id-field", default=None, help="the field or column of the id (default: record number)"
    )
    embed.add_argument(
        "--on-error",
        type=one_of(("skip", "fail")),
        default="skip",
        help="a bad record: skip it (reported in OUTPUT.errors.jsonl) or stop the job",
    )
    embed.add_argument(
        "--truncate",
        action="store_true",
        help="cut texts longer than the model takes instead of reporting them as bad",
    )
    embed.add_argument(
        "--dimensions", type=integer(1), default=None, help="keep the first N dimensions"
    )
    embed.add_argument(
        "--no-normalize",
        dest="normalize",
        action="store_const",
        const=False,
        default=None,
        help="keep the vectors as the model's pooling makes them (default: as the model says)",
    )
    embed.add_argument(
        "--part-rows",
        type=integer(1),
        default=8192,
        help="records per part file: what a killed job redoes at most",
    )
    embed.add_argument(
        "--overwrite", action="store_true", help="start again over an existing output"
    )
    _add_command_flags(embed)
    _add_ray_flags(embed, "embed the parts on --replicas engine actors of a Ray cluster")


class _DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's default after its help, unless the help already says what it is (once is
    enough) or there is none to show (a None default: the help says what happens then)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS, False):
            return text
        return super()._get_help_string(action)


class _EmbedHelpFormatter(argparse.RawDescriptionHelpFormatter, _DefaultsHelpFormatter):
    """The description as written (paragraphs), the flags with their defaults."""


def _add_ray_flags(parser: argparse.ArgumentParser, what: str) -> None:
    group = parser.add_argument_group("Ray (pip install 'poolserve[ray]')")
    group.add_argument(
        "--ray",
        action=argparse.BooleanOptionalAction,
        default=env_default("--ray", False),
        help=what,
    )
    group.add_argument(
        "--replicas",
        type=integer(1),
        default=env_default("--replicas", None),
        help="engines on Ray, one per actor (default: 1)",
    )
    group.add_argument(
        "--replica-cpus",
        type=positive_number("a number of CPUs above 0"),
        default=env_default("--replica-cpus", None),
        help="CPUs Ray reserves for each engine, which lays its runners out over them (default: 1)",
    )
    group.add_argument(
        "--ray-address",
        default=env_default("--ray-address", None),
        help="the Ray cluster to join (auto, or host:port of its head); default: start a Ray "
        "instance of this machine alone (node address 127.0.0.1) for as long as the command runs",
    )


def parse_args(argv: Sequence[str] | None = None, *, raising: bool = False) -> argparse.Namespace:
    """The command line, every value checked (boolean variables included); `raising`: a bad
    one raises SettingError (its message the command line's) instead of exiting."""
    parser = build_parser(raising=raising)
    args = parser.parse_args(argv)
    for name in BOOLEAN_FLAGS:
        if hasattr(args, name):
            try:
                setattr(args, name, boolean(getattr(args, name)))
            except argparse.ArgumentTypeError as exc:
                parser.error(f"argument --{name.replace('_', '-')}: {exc}")
    if args.command in ("serve", "embed") and args.prompt is None:
        try:
            args.prompt = [name_and_text(line) for line in env_lines("--prompt") or ()]
        except argparse.ArgumentTypeError as exc:
            parser.error(f"argument --prompt: {exc}")
    if not args.ray:
        given = [flag for flag in RAY_ONLY_FLAGS if getattr(args, flag) is not None]
        if given:
            parser.error(f"argument --{given[0].replace('_', '-')} needs --ray")
    else:
        args.replicas = args.replicas or 1
        args.replica_cpus = args.replica_cpus or 1.0
    if args.command == "compile":
        _check_models(parser, args)
    if args.command == "serve":
        _check_models(parser, args)
        try:  # the limits that need no model; create_app checks the model's length too
            configs_from_args(args)[2].check_limits()
        except SettingError as exc:
            parser.error(exc.cli_message)
    return args


def _check_models(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The models to serve come from one place: the positional MODELs (or POOLSERVE_MODEL), or
    --config; `args.model` is the first (or only) one."""
    if not args.models and args.config is None:
        args.models = [env_default("--model", None)]
    if args.config is not None:
        given = [
            flag
            for flag, value in (
                ("MODEL", args.models),
                ("--served-model-name", args.served_model_name),
                ("--prompt", args.prompt),
            )
            if value
        ]
        if given:
            parser.error(f"{given[0]} and --config: with --config, the file names each model")
    elif len(args.models) > 1 and args.served_model_name:
        parser.error("--served-model-name names one model; with several, name them in --config")
    elif len(args.models) > 1 and args.prompt:
        parser.error("--prompt applies to one model; with several, give prompts in --config")
    if args.ray and (args.config is not None or len(args.models) > 1):
        parser.error("--ray serves one model; serve several as separate Ray applications")
    args.model = args.models[0] if args.models else None


def configs_from_args(args: argparse.Namespace) -> tuple[ModelConfig, EngineConfig, ServerConfig]:
    model, engine = model_engine_configs(args)
    server = ServerConfig(
        served_model_name=tuple(args.served_model_name) if args.served_model_name else None,
        access_log=args.access_log,
        protect_metrics=args.protect_metrics,
        api_keys=tuple(args.api_key or env_list("--api-key") or ()),
        allowed_origins=tuple(args.allowed_origins or env_list("--allowed-origins") or ()),
        allowed_media_domains=tuple(args.allowed_media_domains or ()),
        **flag_values(args, ServerConfig),
    )
    return model, engine, server
