"""The flags that say what model to load and how its engine runs, shared by `serve`, `embed`
and the model entries of a `--config` file (poolserve/model_file.py)."""

from __future__ import annotations

import argparse

from poolserve.config import EngineConfig, ModelConfig
from poolserve.flags import boolean, env_default, integer, integer_or_off, name_and_text, one_of
from poolserve.models.kinds import KINDS, TASK_CHOICES, VLLM_TASK_NAMES

DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
COMPILE_MODES = ("off", "on", "auto")
PACKING_MODES = ("auto", "off")
ATTENTION = ("auto", "sdpa", "eager")


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--revision",
        type=str,
        default=env_default("--revision", None),
        help="the model's revision (a branch, tag or commit) when it comes from the hub",
    )
    parser.add_argument(
        "--dtype",
        type=one_of(DTYPES),
        choices=DTYPES,
        default=env_default("--dtype", "auto"),
        help="auto: bf16 on CUDA or on CPUs with AMX/AVX512-BF16, else float32",
    )
    parser.add_argument(
        "--device",
        type=one_of(DEVICES),
        choices=DEVICES,
        default=env_default("--device", "auto"),
        help="auto: CUDA when available, else CPU",
    )
    parser.add_argument(
        "--task",
        type=one_of((*TASK_CHOICES, *VLLM_TASK_NAMES)),
        default=env_default("--task", "auto"),
        help="what the model is: auto (detect) or one of " + ", ".join(KINDS) + " (vLLM's "
        "embed, score and classify are accepted for embedding, cross_encoder and classifier)",
    )
    parser.add_argument(
        "--max-model-len",
        type=integer(1),
        default=env_default("--max-model-len", None),
        help="lower the model's length limit (tokens)",
    )
    parser.add_argument(
        "--trust-remote-code",
        action=argparse.BooleanOptionalAction,
        default=env_default("--trust-remote-code", False),
        help="run model code shipped with the checkpoint (config.json's auto_map: nomic-embed, "
        "gte-v1.5, jina-embeddings-v2, ...); that code runs with the server's rights",
    )
    parser.add_argument(
        "--attention",
        type=one_of(ATTENTION),
        choices=ATTENTION,
        default=env_default("--attention", "auto"),
        help="attention implementation: auto (sdpa where the architecture has it, else eager)",
    )
    parser.add_argument(
        "--score-template",
        type=str,
        default=env_default("--score-template", None),
        metavar="FILE",
        help="a JSON file saying how a causal LM served with --task cross_encoder scores a pair "
        "(its prompt segments and yes/no tokens); default: its family's (Qwen3-Reranker, "
        "bge-reranker-v2-gemma)",
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
    defaults = EngineConfig()
    parser.add_argument(
        "--max-batch-tokens",
        type=integer(1),
        default=env_default("--max-batch-tokens", defaults.max_batch_tokens),
        help="padded tokens one forward pass may hold",
    )
    parser.add_argument(
        "--max-batch-size",
        type=integer(1),
        default=env_default("--max-batch-size", defaults.max_batch_size),
        help="inputs one forward pass may hold",
    )
    parser.add_argument(
        "--bucket-padding-tokens",
        type=integer_or_off(0),
        default=env_default("--bucket-padding-tokens", defaults.bucket_padding_tokens),
        help="cut a batch into length buckets where its next-longer input would add more than "
        "this many padding tokens in all (real text varies in length; 32 measured best on "
        "CPU; 0: each length alone; off: one batch padded to its longest)",
    )
    parser.add_argument(
        "--packing",
        type=one_of(PACKING_MODES),
        choices=PACKING_MODES,
        default=env_default("--packing", defaults.packing),
        help="run several inputs in one row of a batch, each attending to itself only (no "
        "padding to the longest input); auto: where the model packs correctly, which is checked "
        "at start-up (others run length buckets); off: padded batches only",
    )
    parser.add_argument(
        "--cpu-workers",
        type=integer(1),
        default=env_default("--cpu-workers", defaults.cpu_workers),
        help="threads for tokenization and response building (default: cores)",
    )
    parser.add_argument(
        "--runners",
        type=integer(1),
        default=env_default("--runners", None),
        help="model runner threads, each running its own batches over one copy of the weights "
        "(default: one per core on CPU, one on CUDA)",
    )
    parser.add_argument(
        "--torch-threads",
        type=integer(1),
        default=env_default("--torch-threads", None),
        help="threads torch uses inside one operator, per runner (default on CPU: cores ÷ runners)",
    )
    parser.add_argument(
        "--single-thread-tokens",
        type=integer(0),
        default=env_default("--single-thread-tokens", defaults.single_thread_tokens),
        help="on CPU, batches under this many padded tokens run on one torch thread, larger ones "
        "also use the cores of idle runners (0: never one thread)",
    )
    parser.add_argument(
        "--compile",
        type=one_of(COMPILE_MODES),
        choices=COMPILE_MODES,
        default=env_default("--compile", "auto"),
        help="compile the model's forward ahead of time (cached under POOLSERVE_CACHE_DIR, so "
        "a restart loads it in a second; `poolserve compile` fills the cache); auto: on CPU "
        "where a C++ compiler is found (`embed`: only what the cache holds, else eagerly: a "
        "job never waits for a compile)",
    )


def model_engine_configs(args: argparse.Namespace) -> tuple[ModelConfig, EngineConfig]:
    """What to load and how to run it: the flags `serve` and `embed` share."""
    model = ModelConfig(
        model=args.model,
        revision=args.revision,
        dtype=args.dtype,
        device=args.device,
        max_model_len=args.max_model_len,
        task=None if args.task == "auto" else args.task,
        prompts=tuple(args.prompt or ()),
        trust_remote_code=boolean(args.trust_remote_code),
        attention=args.attention,
        score_template=args.score_template,
    )
    engine = EngineConfig(
        max_batch_tokens=args.max_batch_tokens,
        max_batch_size=args.max_batch_size,
        bucket_padding_tokens=args.bucket_padding_tokens,
        packing=args.packing,
        cpu_workers=args.cpu_workers,
        runners=args.runners,
        torch_threads=args.torch_threads,
        single_thread_tokens=args.single_thread_tokens,
        compile=args.compile,
    )
    return model, engine
