"""What to load and how its engine runs: `ModelConfig`, `EngineConfig`, and `ServedModel` (the two
with the names a model is served under). Each field made by `setting` is also a flag of `serve`,
`embed` and `compile`, and a key of a `--config` file's model entries (config/fields.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Literal

from poolserve.config.fields import setting
from poolserve.config.runtime_table import RUNTIMES

# The model backends by name (`--backend`): their modules, extras and what each can run are in
# config/runtime_table.py (names only: nothing here imports a backend).
BACKENDS = tuple(entry.name for entry in RUNTIMES)

DType = Literal["auto", "float32", "bfloat16", "float16"]
Device = Literal["auto", "cpu", "cuda"]
# auto: compiled ahead of time by `poolserve compile` where it can work, and served where the
# cache holds it and it pays (a start builds nothing); cached: load it from the cache where it
# is there, else run eagerly; on: compile at start, or refuse to start.
CompileMode = Literal["off", "on", "auto", "cached"]
PackingMode = Literal["auto", "off"]
# `--quantize`: off, or int8 weights (per output channel) with activations quantized as they run.
Quantize = Literal["off", "int8"]
# What a quantized model that fails its quality gate gets: a refusal to start, or the model
# served unquantized (said in the log and /info).
QuantizeGate = Literal["refuse", "fallback"]
# Attention implementation: auto lets transformers pick (sdpa where the architecture has it).
Attention = Literal["auto", "sdpa", "eager"]
# What an input longer than the model's length gets when its request does not say
# (tasks/chunking.py): refused, cut, or embedded in chunks.
LongInput = Literal["truncate", "chunk", "error"]
# What a model is (models/kinds.py), as `--task` names it; vLLM's `--task` names are accepted for
# the kinds they mean without doubt; auto: detected from the checkpoint.
Kind = Literal[
    "embedding", "cross_encoder", "classifier", "late_interaction", "sparse", "token_classifier"
]
VllmTask = Literal["embed", "score", "classify"]
Task = Literal["auto", Kind, VllmTask]


@dataclass(frozen=True)
class ModelConfig:
    """What model to load and how. Each field made by `setting` is also a flag (see
    poolserve/config/fields.py)."""

    # A local directory or a Hugging Face hub id; None means the bundled default model.
    model: str | None = setting(
        None,
        help="a local model directory or hub id (default: POOLSERVE_MODEL, else the bundled "
        "all-MiniLM-L6-v2)",
    )
    revision: str | None = setting(
        None, help="the model's revision (a branch, tag or commit) when it comes from the hub"
    )
    dtype: DType = setting(
        "auto",
        help="auto: on a CPU that runs more than float32 well (AVX512-BF16, AMX), the "
        "precision measured fastest for this model on its first start, within 0.045 of "
        "float32's outputs (kept in the cache under POOLSERVE_CACHE_DIR); else float32; on "
        "CUDA, bf16 where supported, else float16",
    )
    device: Device = setting("auto", help="auto: CUDA when available, else CPU")
    # Overrides the length limit read from the model (must not exceed what the model supports).
    max_model_len: int | None = setting(
        None, minimum=1, help="lower the model's length limit (tokens)"
    )
    # None: the model's own rule (truncate for a static model that cuts texts, else error).
    long_input: LongInput | None = setting(
        None,
        help="what an embedding input longer than the model's length gets when its request "
        "does not say (long_input, or its API's truncation field): error (a 400), truncate, or "
        "chunk (embedded in chunks, their vectors averaged by tokens); default: truncate for a "
        "static model that cuts texts at its max_length (model2vec), else error",
    )
    max_input_tokens: int = setting(
        32768,
        minimum=1,
        help="the most tokens one embedding input may have when it is chunked",
    )
    # Forces the kind of model (see models/kinds.py); "auto" (or None) detects it.
    task: Task | None = setting(
        "auto",
        help="what the model is: auto (detect), or a kind: embedding, cross_encoder, "
        "classifier, late_interaction, sparse, token_classifier (vLLM's embed, score and "
        "classify are accepted for embedding, cross_encoder and classifier)",
    )
    # Prompts by name, added to (or replacing) those in the model's
    # config_sentence_transformers.json.
    prompts: tuple[tuple[str, str], ...] = setting(
        (),
        name="--prompt",
        metavar="NAME=TEXT",
        env_lines=True,
        help="add or replace one of the model's prompts (as in its "
        "config_sentence_transformers.json), e.g. --prompt 'query=query: '; repeat for several "
        "(POOLSERVE_PROMPT: one per line)",
    )
    # Run model code shipped with the checkpoint (config.json's auto_map); off: such a model is
    # refused, or loaded with transformers' own classes where it has them.
    trust_remote_code: bool = setting(
        False,
        help="run model code shipped with the checkpoint (config.json's auto_map: nomic-embed, "
        "gte-v1.5, jina-embeddings-v2, ...); that code runs with the server's rights",
    )
    attention: Attention = setting(
        "auto",
        help="attention implementation: auto (sdpa where the architecture has it, else eager)",
    )
    # A JSON file saying how a causal LM scores a query-document pair (models/score_template.py);
    # None: the built-in template of the model's family.
    score_template: str | None = setting(
        None,
        metavar="FILE",
        help="a JSON file saying how a causal LM served with --task cross_encoder scores a pair "
        "(its prompt segments and yes/no tokens); default: its family's (Qwen3-Reranker, "
        "bge-reranker-v2-gemma)",
    )

    @staticmethod
    def of(model: str | None, config: ModelConfig | None) -> ModelConfig:
        """The config of a call that takes both a `model` and a `model_config` (either may be
        left out; both must not name different models)."""
        if config is None:
            return ModelConfig(model=model)
        if model is None:
            return config
        if config.model not in (None, model):
            raise ValueError(
                f"two models given: {model!r} and model_config.model {config.model!r}; pass one"
            )
        return replace(config, model=model)


@dataclass(frozen=True)
class EngineConfig:
    """How the engine tokenizes, batches and schedules work. Each field made by `setting` is
    also a flag of `serve` and `embed` (poolserve/config/fields.py)."""

    max_batch_tokens: int = setting(
        16384,
        minimum=1,
        help="padded tokens (batch size x longest input) one forward pass may hold",
    )
    max_batch_size: int = setting(256, minimum=1, help="inputs one forward pass may hold")
    # See engine/scheduler.py.
    bucket_padding_tokens: int | None = setting(
        32,
        minimum=0,
        off=True,
        help="cut a batch into length buckets where its next-longer input would add more than "
        "this many padding tokens in all (real text varies in length; 32 measured best on "
        "CPU; 0: each length alone; off: one batch padded to its longest)",
    )
    # See backends/torch_model/packing.py.
    packing: PackingMode = setting(
        "auto",
        help="run several inputs in one row of a batch, each attending to itself only (no "
        "padding to the longest input); auto: where the model packs correctly, which is checked "
        "at start-up (others run length buckets); off: padded batches only",
    )
    cpu_workers: int = setting(
        default_factory=lambda: os.cpu_count() or 1,
        minimum=1,
        help="threads for tokenization and response building (default: cores)",
    )
    runners: int | None = setting(
        None,
        minimum=1,
        help="model runner threads, each running its own batches over one copy of the weights "
        "(default: one per core on CPU, one on CUDA)",
    )
    torch_threads: int | None = setting(
        None,
        minimum=1,
        help="threads torch uses inside one operator, per runner (default on CPU: cores ÷ runners)",
    )
    # See backends/torch_model/executor.py and engine/scheduler.py.
    single_thread_tokens: int = setting(
        256,
        minimum=0,
        help="on CPU, batches under this many padded tokens run on one torch thread, larger ones "
        "also use the cores of idle runners (0: never one thread)",
    )
    # See backends/torch_model/batch_invariant.py.
    batch_invariant: bool = setting(
        False,
        help="a text's outputs are the same bits whatever batch it runs in (alone, beside any "
        "others, on any runner): linear layers in fixed blocks, attention and pooling per "
        "sequence, padded and eager batches on a fixed number of threads (see the docs' "
        "Performance page for what it costs)",
    )
    # See engine/lanes.py and engine/scheduler.py.
    background_slice: float = setting(
        0.025,
        number="non_negative",
        help="without an express runner (--no-express-runner, or on a GPU): while background "
        "work (priority above 0) waits and requests of priority 0 or above arrive, each batch "
        "is cut to what a runner runs in this many seconds (at the engine's measured rate): "
        "those requests wait about this long at most for a runner, however much background "
        "work is queued; 0: batches as large as any",
    )
    # See engine/scheduler.py (`next_express_batch`).
    # On with the commands (a server's clients mix lanes); off in Python, where one caller
    # rarely does and the thread would idle.
    express_runner: bool = setting(
        False,
        cli_default=True,
        help="on CPU, one more runner thread, for requests of priority 0 and above that arrive "
        "while background work (priority above 0) holds every runner: they run at once, "
        "sharing the cores, rather than wait for a background batch to end (then background "
        "batches are not cut into --background-slice slices); never for a static model, whose "
        "batches end within milliseconds",
    )
    # torch in Python (measuring every engine adds seconds to a first start); the commands
    # default to auto.
    backend: str = setting(
        "torch",
        cli_default="auto",
        choices=("auto", *BACKENDS),
        help="what runs the model: auto: each engine installed (torch eager or compiled, ONNX "
        "Runtime, OpenVINO) in each precision the CPU runs well (int8 with --quantize int8) "
        "timed on real text at its first start, the fastest within the quality gate served, "
        "the choice kept in the cache under POOLSERVE_CACHE_DIR (`poolserve compile` measures "
        "it ahead of time); torch: PyTorch; onnxruntime, openvino: the main head exported to "
        "ONNX, cached, and run by that runtime (openvino in bf16 where the CPU has it and it "
        "is measured faster, unless --dtype says)",
    )
    # See backends/onnxruntime/int8.py and backends/quality_gate.py.
    quantize: Quantize = setting(
        "off",
        help="int8: weights quantized per output channel, activations as they run (onnxruntime, "
        "about twice float32 on a CPU with VNNI) or calibrated once (--backend openvino); "
        "checked at its first start against the "
        "unquantized model on real text shipped with the package (embeddings cosine >= 0.99 "
        "mean and >= 0.98 min, scores within 0.02, labels unchanged)",
    )
    quantize_gate: QuantizeGate = setting(
        "refuse",
        help="a quantized model below the quality gate: refuse to start (naming the figures), or "
        "fallback: serve it unquantized and say so",
    )
    # Off in Python (compiling takes tens of seconds at start-up); the commands default to auto.
    compile: CompileMode = setting(
        "off",
        cli_default="auto",
        help="compile the model's forward ahead of time (cached under POOLSERVE_CACHE_DIR); "
        "auto: `poolserve compile` builds it on CPU where a C++ compiler is found and measures "
        "it against eager, and `serve` and `embed` run it where the cache holds it and it "
        "pays, else eagerly (a start never waits for a compile); on: compile it at start "
        "(torch.compile where it cannot be exported) and serve it compiled; cached: only what "
        "the cache holds",
    )
    # See engine/result_cache.py.
    cache_bytes: int = setting(
        0,
        minimum=0,
        help="keep the model's outputs for inputs seen before, up to this many bytes (an LRU; "
        "a repeat is answered without the model, in the same bytes); 0: no cache",
    )
    # Inputs per CPU-pool task when a request is tokenized; large requests are split in chunks of
    # this size so that they interleave with small requests instead of blocking them.
    tokenize_chunk_size: int = 64
    # How many waiting items the scheduler looks at when it sorts by length to cut padding.
    schedule_window: int = 1024
    # The cores this engine may use, for its default runners and torch threads; None: the
    # process's CPU affinity. Set where several engines share a machine (Ray replicas).
    cores: int | None = None


@dataclass(frozen=True)
class ServedModel:
    """One model of several behind one server (or one `ModelSet`): what to load, how its engine
    batches, and the names clients may call it by (default: the model's id)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    served_names: tuple[str, ...] | None = None
