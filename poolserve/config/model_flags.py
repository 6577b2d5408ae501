"""The flags that say what model to load and how its engine runs, shared by `serve`, `embed`
and the model entries of a `--config` file (poolserve/config/model_file.py).

Most are generated from the config dataclasses' settings (poolserve/config/fields.py); the few here
by hand read differently from their field: `--task auto` is None, `--prompt` repeats into a
tuple, `--trust-remote-code` is a boolean switch."""

from __future__ import annotations

import argparse

from poolserve.config import EngineConfig, ModelConfig
from poolserve.config.fields import add_flags, flag_values
from poolserve.config.values import boolean, env_default, name_and_text, one_of
from poolserve.models.kinds import KINDS, TASK_CHOICES, VLLM_TASK_NAMES


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, ModelConfig)
    parser.add_argument(
        "--task",
        type=one_of((*TASK_CHOICES, *VLLM_TASK_NAMES)),
        default=env_default("--task", "auto"),
        help="what the model is: auto (detect) or one of " + ", ".join(KINDS) + " (vLLM's "
        "embed, score and classify are accepted for embedding, cross_encoder and classifier)",
    )
    parser.add_argument(
        "--trust-remote-code",
        action=argparse.BooleanOptionalAction,
        default=env_default("--trust-remote-code", False),
        help="run model code shipped with the checkpoint (config.json's auto_map: nomic-embed, "
        "gte-v1.5, jina-embeddings-v2, ...); that code runs with the server's rights",
    )
    parser.add_argument(
        "--prompt",
        action="append",
        type=name_and_text,
        default=None,
        metavar="NAME=TEXT",
        help="add or replace one of the model's prompts (as in its "
        "config_sentence_transformers.json), e.g. --prompt 'query=query: '; repeat for several "
        "(POOLSERVE_PROMPT: one per line)",
    )


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, EngineConfig)


def model_engine_configs(args: argparse.Namespace) -> tuple[ModelConfig, EngineConfig]:
    """What to load and how to run it: the flags `serve` and `embed` share."""
    model = ModelConfig(
        model=args.model,
        task=None if args.task == "auto" else args.task,
        prompts=tuple(args.prompt or ()),
        trust_remote_code=boolean(args.trust_remote_code),
        **flag_values(args, ModelConfig),
    )
    return model, EngineConfig(**flag_values(args, EngineConfig))
