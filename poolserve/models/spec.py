"""What is known about a model before its weights are loaded (`ModelSpec`): its layout, kind,
tokenizer, and where and in what precision it runs, by name. No torch here: the engine and the
backend seam read it; models/describe.py makes it (`prepare_model`), a backend places it (its
device and dtype) and loads the weights."""

from __future__ import annotations

from dataclasses import dataclass, field

from tokenizers import Tokenizer

from poolserve.config.model_config import LongInput
from poolserve.models.kinds import HEADS, Head, Kind
from poolserve.models.layout import ModelLayout
from poolserve.models.score_template import ScoreTemplate


@dataclass(frozen=True)
class ModelSpec:
    """Everything known about a model before its weights are loaded: no torch work is done here.

    The weights are loaded by `load_module` on the thread that will run the model: torch's OpenMP
    thread team belongs to the thread that first runs an operator, and a second team (say the
    main thread's, from loading) makes every operator of the runner thread about twice as slow.
    """

    name: str
    layout: ModelLayout
    kind: Kind
    # The tokenizer's definition (each CPU-pool thread parses its own from it), and the one
    # parsed at start-up, for start-up's work on one thread at a time (tasks' settings, warm-up
    # batches): fast tokenizers are not re-entrant.
    tokenizer_json: str
    tokenizer: Tokenizer = field(compare=False, repr=False)
    # Where and in what precision it runs, by name ("cpu", "cuda"; "float32", "bfloat16"): as
    # asked ("auto" too) until a backend places it.
    device: str = "auto"
    dtype: str = "auto"
    # The task that forced the kind, None where the kind was detected.
    forced_task: str | None = None
    # Prompts given at start-up (--prompt), over the model's own.
    prompts: tuple[tuple[str, str], ...] = ()
    trust_remote_code: bool = False
    attention: str = "auto"
    # A causal LM served as a reranker: how it reads a pair and which logits score it.
    score_template: ScoreTemplate | None = None
    # The model's own length limit where a smaller batch budget capped it (see `prepare_model`).
    capped_from: int | None = None
    # The tokenizer's padding token, where texts are padded with it rather than with config.json's
    # pad_token_id (an image-text model, whose config.json has none at its top level).
    tokenizer_pad_id: int | None = None

    @property
    def heads(self) -> tuple[Head, ...]:
        if self.layout.vision is not None and self.kind == "embedding":
            # CLIP, SigLIP: text vectors and image vectors in one space.
            return ("embed", "image_embed")
        if self.layout.m3_heads and self.kind == "embedding":
            # BGE-M3: dense, lexical (sparse) and multi-vector outputs, and all three at once.
            return ("embed", "token_embed", "sparse", "m3")
        return HEADS[self.kind]

    @property
    def default_long_input(self) -> LongInput:
        """What a long input gets where neither the request nor --long-input says: a static
        model that cuts texts (model2vec's max_length) cuts them, as its library does; any
        other refuses them."""
        static = self.layout.static
        return "truncate" if static is not None and static.max_length else "error"

    @property
    def max_model_len(self) -> int:
        return self.layout.max_model_len

    @property
    def embedding_dim(self) -> int:
        return self.layout.embedding_dim

    @property
    def output_floats(self) -> tuple[int, bool]:
        """The floats of one input's output, and whether it has them per token: what the memory
        bound (docs/production.md) calls D (BGE-M3: its largest output, the lexical weights)."""
        config = self.layout.hf_config
        vocab = int(config.get("vocab_size") or config.get("text_config", {}).get("vocab_size", 0))
        if self.kind == "sparse" or "sparse" in self.heads:
            return max(vocab, self.embedding_dim), False
        if self.kind in ("cross_encoder", "classifier"):
            return self.layout.num_labels, False
        if self.kind == "token_classifier":
            return self.layout.num_labels, True
        return self.embedding_dim, self.kind == "late_interaction"

    @property
    def pad_token_id(self) -> int:
        if self.tokenizer_pad_id is not None:
            return self.tokenizer_pad_id
        return int(self.layout.hf_config.get("pad_token_id") or 0)

    @property
    def special_token_ids(self) -> tuple[int, ...]:
        """The ids of the tokenizer's special tokens ([CLS], </s>, padding, unknown, ...)."""
        return tuple(
            sorted(
                token_id
                for token_id, token in self.tokenizer.get_added_tokens_decoder().items()
                if token.special
            )
        )

    @property
    def num_special_tokens(self) -> int:
        """The special tokens the tokenizer adds to one text ([CLS] and [SEP] for BERT)."""
        count: int = self.tokenizer.num_special_tokens_to_add(False)
        return count
