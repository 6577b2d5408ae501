"""The embedding task: texts or token ids in, one vector each out (normalized, sliced)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from poolserve.engine.request import ServeContext
from poolserve.engine.tokenizer import TextTokenizer, TokenizedText
from poolserve.tasks.inputs import InputsTask, l2_normalize, tokenize_inputs

EmbedInputs = list[str] | list[list[int]]


@dataclass(frozen=True)
class EmbedRequest:
    """An embedding request as the engine sees it (validated at the edge)."""

    inputs: EmbedInputs
    # Put before each text input (see tasks/prompts.py); None: none.
    prompt: str | None = None


class EmbedTask(InputsTask[EmbedRequest]):
    """Task processor for `/v1/embeddings` and the offline `embed`: float32 vectors."""

    def __init__(self, *, max_model_len: int, include_prompt: bool = True) -> None:
        super().__init__(max_model_len=max_model_len)
        # False: a prompt's tokens are attended to but not pooled (the Pooling config's
        # include_prompt).
        self.include_prompt = include_prompt

    def preprocess(
        self,
        ctx: ServeContext[EmbedRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[str] | Sequence[list[int]],
    ) -> list[TokenizedText]:
        prompt = ctx.request.prompt
        tokenized = tokenize_inputs(
            tokenizer,
            inputs,
            start,
            truncate=ctx.pooling_params.truncate_prompt_tokens,
            max_model_len=self.max_model_len,
            head=self.head,
            prompt=prompt,
            side=ctx.pooling_params.truncation_side,
        )
        if prompt and not self.include_prompt and inputs and isinstance(inputs[0], str):
            # As sentence-transformers: the tokenized prompt without its closing [SEP] ([CLS]
            # and the prompt's words) is left out of the mean.
            prompt_length = len(tokenizer.encode_batch([prompt], truncate_to=None)[0]) - 1
            tokenized = [replace(text, pool_from=prompt_length) for text in tokenized]
        return tokenized

    def postprocess(self, ctx: ServeContext[EmbedRequest], outputs: list[np.ndarray]) -> np.ndarray:
        vectors = np.stack(outputs).astype(np.float32, copy=False)
        params = ctx.pooling_params
        if params.dimensions is not None:
            vectors = vectors[:, : params.dimensions]
        if params.normalize:
            vectors = l2_normalize(vectors)
        return np.ascontiguousarray(vectors)
