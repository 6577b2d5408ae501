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

from poolserve.config.fields import (
    add_flags,
    finish_flags,
    flag_arguments,
    setting_keys,
    setting_values,
)
from poolserve.config.grammar import model_engine_configs
from poolserve.config.model_config import EngineConfig, ModelConfig, ServedModel
from poolserve.config.server_config import ServerConfig
from poolserve.config.values import RaisingParser, unknown_setting
from poolserve.errors import SettingError

# Settings of the whole server, not of one model: the one CPU pool all models share.
SERVER_WIDE = {"cpu_workers": "one CPU pool serves every model: pass --cpu-workers"}
# The settings of one entry: the model's names, what to load and how its engine runs.
ENTRY_SETTINGS: tuple[tuple[type, dict[str, Any]], ...] = (
    (ServerConfig, {"only": ("served_model_name",)}),
    (ModelConfig, {"exclude": ("model",)}),
    (EngineConfig, {}),
)


def _entry_parser() -> RaisingParser:
    """The flags of one model; a refusal raises (a file is read by the Python API too)."""
    parser = RaisingParser(prog="model", add_help=False)
    parser.add_argument("model")
    for config_type, which in ENTRY_SETTINGS:
        add_flags(parser, config_type, **which)
    return parser


def base_settings(model: ModelConfig, engine: EngineConfig) -> argparse.Namespace:
    """The settings an entry starts from, by field name, as the entry's parser names them (a
    list a list: an entry's repeated flag adds to it)."""
    values = {**setting_values(model), **setting_values(engine)}
    values.pop("model")
    lists = {key: list(value) for key, value in values.items() if isinstance(value, tuple)}
    return argparse.Namespace(served_model_name=None, **{**values, **lists})


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
    prompts = entry.get("prompts")
    if prompts is not None and not isinstance(prompts, Mapping):
        raise SettingError(f"{where}: `prompts` maps prompt names to their texts")
    parser = _entry_parser()
    types = [config_type for config_type, _ in ENTRY_SETTINGS]
    known = {"model"} | {
        key for key, each in setting_keys(types).items() if each.field.name in vars(base)
    }
    known -= SERVER_WIDE.keys()
    for key in entry:
        if key.replace("-", "_") in SERVER_WIDE:
            raise SettingError(f"{where}: `{key}` is the server's: {SERVER_WIDE[key]}")
    unknown = unknown_setting(entry, known)
    if unknown:
        raise SettingError(f"{where}: {unknown}")
    settings = {key: value for key, value in entry.items() if key != "model"}
    argv = [entry["model"], *flag_arguments(settings, types)]
    try:
        args = parser.parse_args(argv, namespace=argparse.Namespace(**vars(base)))
        finish_flags(args, types, parser)
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
