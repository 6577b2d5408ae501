"""A file of models (`poolserve serve --config models.toml`, `ModelSet.load("models.yaml")`).

TOML, YAML or JSON, by its extension; one list of models, each a mapping of the model's own
settings, named as the `serve` flags that say what to load and how its engine runs:

    [[models]]
    model = "sentence-transformers/all-MiniLM-L6-v2"
    served_model_name = ["minilm", "embedder"]
    dtype = "bfloat16"
    prompts = { query = "query: " }

    [[models]]
    model = "/models/ms-marco-MiniLM-L6-v2"
    max_batch_tokens = 8192

Each entry is checked by those flags' own parser (same ranges, same one-line refusals, unknown
keys named with the nearest known one); what an entry leaves out comes from the base settings
(the command line's flags, or the Python defaults).
"""

from __future__ import annotations

import argparse
import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from poolserve.config import EngineConfig, ModelConfig, ServedModel
from poolserve.config.fields import setting_values
from poolserve.config.model_flags import add_engine_flags, add_model_flags, model_engine_configs
from poolserve.config.values import RaisingParser, flag_arguments, unknown_setting
from poolserve.errors import SettingError

# Settings of the whole server, not of one model: the one CPU pool all models share.
SERVER_WIDE = {"cpu_workers": "one CPU pool serves every model: pass --cpu-workers"}


def _entry_parser() -> RaisingParser:
    """The flags of one model; a refusal raises (a file is read by the Python API too)."""
    parser = RaisingParser(prog="model", add_help=False)
    parser.add_argument("model")
    parser.add_argument("--served-model-name", nargs="+", default=None)
    add_model_flags(parser)
    add_engine_flags(parser)
    return parser


def base_settings(model: ModelConfig, engine: EngineConfig) -> argparse.Namespace:
    """The settings an entry starts from, as the flags' parser names them."""
    return argparse.Namespace(
        served_model_name=None,
        task=model.task or "auto",
        prompt=list(model.prompts),
        trust_remote_code=model.trust_remote_code,
        **setting_values(model),
        **setting_values(engine),
    )


def read_model_file(path: str | Path, base: argparse.Namespace) -> list[ServedModel]:
    """The models a file lists, each checked; SettingError (one line, naming the file and the
    entry) if the file or an entry cannot work."""
    path = Path(path)
    try:
        data = _load(path)
    except OSError as exc:
        raise SettingError(f"--config {path}: cannot read it: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, ValueError) as exc:
        raise SettingError(f"--config {path}: not valid {path.suffix[1:]}: {exc}") from None
    if not isinstance(data, Mapping) or set(data) != {"models"}:
        raise SettingError(
            f"--config {path}: the file holds one key, `models`, a list of models (server "
            "settings are flags)"
            + (f"; found {', '.join(map(str, data))}" if isinstance(data, Mapping) else "")
        )
    entries = data["models"]
    if not isinstance(entries, list) or not entries:
        raise SettingError(f"--config {path}: `models` must be a list of at least one model")
    return [_served_model(path, index, entry, base) for index, entry in enumerate(entries)]


def _load(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return tomllib.loads(text)
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(str(exc).replace("\n", " ")) from None
    if suffix == ".json":
        return json.loads(text)
    raise SettingError(f"--config {path}: name it .toml, .yaml, .yml or .json (its format)")


def _served_model(path: Path, index: int, entry: Any, base: argparse.Namespace) -> ServedModel:
    where = f"--config {path}, model {index + 1}"
    if not isinstance(entry, Mapping) or not isinstance(entry.get("model"), str):
        raise SettingError(f"{where}: each model is a mapping with a `model` (a path or hub id)")
    where += f" ({entry['model']})"
    settings = dict(entry)
    prompts = settings.pop("prompts", None)
    if prompts is not None:
        if not isinstance(prompts, Mapping):
            raise SettingError(f"{where}: `prompts` maps prompt names to their texts")
        settings["prompt"] = [f"{name}={text}" for name, text in prompts.items()]
    parser = _entry_parser()
    known = {action.dest for action in parser._actions} - SERVER_WIDE.keys()
    for key in settings:
        if key.replace("-", "_") in SERVER_WIDE:
            raise SettingError(f"{where}: `{key}` is the server's: {SERVER_WIDE[key]}")
    unknown = unknown_setting(settings, known | {"prompts"})
    if unknown:
        raise SettingError(f"{where}: {unknown}")
    argv = flag_arguments(settings, positional="model", nargs_flags=("served_model_name",))
    try:
        args = parser.parse_args(argv, namespace=argparse.Namespace(**vars(base)))
    except SettingError as exc:
        raise SettingError(f"{where}: {_as_keys(exc.cli_message)}") from None
    model, engine = model_engine_configs(args)
    names = args.served_model_name
    return ServedModel(model, engine, tuple(names) if names else None)


def _as_keys(message: str) -> str:
    """A flag parser's refusal in the file's words: `argument --max-batch-size: ...` becomes
    `max_batch_size: ...`."""
    if message.startswith("argument --"):
        flag, _, rest = message.removeprefix("argument --").partition(":")
        return flag.replace("-", "_") + ":" + rest
    return message
