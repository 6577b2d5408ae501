"""What every task does with its inputs: check pooling options, tokenize texts or token ids,
enforce the model's length limit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

import numpy as np

from poolserve.engine.context import ServeContext
from poolserve.engine.work import Parts
from poolserve.errors import InputTooLongError, InvalidRequestError
from poolserve.inputs.tokenizer import CHARS_PER_TOKEN, Side, TextTokenizer, TokenizedText
from poolserve.models.kinds import Head

Inputs = Sequence[str] | Sequence[list[int]]


def param_of(where: str) -> str:
    """The request field an input's name points into: "documents[2]" -> "documents"."""
    return where.split("[")[0].split(" ")[0]


def bound_text(
    tokenizer: TextTokenizer,
    text: str,
    where: str,
    max_model_len: int,
    truncating: bool,
    index: int | None = None,
    side: Side = "right",
) -> str:
    """The text to tokenize for the input `where` names ("input 3", "documents[2]").

    One rule for every entrance: an empty or whitespace-only input has nothing to embed and is
    refused. A text too long for the model is refused or, when truncating, cut to a prefix that
    holds its first tokens (a suffix holding its last ones, `side` "left"), decided from a
    bounded prefix (`TextTokenizer.leading_tokens`) or suffix (`trailing_tokens`)."""
    if not text.strip():
        raise InvalidRequestError(
            f"{where} is {'empty' if not text else 'only whitespace'}; every input "
            "needs some text (remove it, or send its text)",
            param=param_of(where),
        )
    if len(text) <= max_model_len * CHARS_PER_TOKEN:
        return text
    if truncating and side == "left":
        start, trailing = tokenizer.trailing_tokens(text, max_model_len)
        if len(trailing) <= max_model_len:
            return text
        return text[start + trailing.offsets[-max_model_len][0] :]
    leading = tokenizer.leading_tokens(text, max_model_len)
    if len(leading) <= max_model_len:
        return text
    if truncating:
        return text[: leading.offsets[-1][1]]
    raise InputTooLongError(
        where,
        f"has more than {max_model_len} tokens ({len(leading)} in its first "
        f"{leading.offsets[-1][1]} characters), but the model accepts at most {max_model_len}",
        param=param_of(where),
        index=index,
    )


def check_length(length: int, where: str, max_model_len: int, index: int | None = None) -> None:
    if length > max_model_len:
        raise InputTooLongError(
            where,
            f"has {length} tokens, but the model accepts at most {max_model_len}",
            param=param_of(where),
            index=index,
        )


def tokenize_inputs(
    tokenizer: TextTokenizer,
    inputs: Inputs,
    start: int,
    *,
    truncate: int | None,
    max_model_len: int,
    head: Head,
    name: Callable[[int], str] = "input {}".format,
    position: Callable[[int], int | None] | None = None,
    prompt: str | None = None,
    side: Side = "right",
    add_special_tokens: bool = True,
) -> list[TokenizedText]:
    """Tokenize texts (special tokens added, unless `add_special_tokens` is false), each after
    `prompt` where there is one, or check token-id lists (used as given).

    Token-id inputs are cut to their first `truncate` ids; texts keep their special tokens.
    `name` names input `start + offset` in errors, `position` its index in the list an error
    points into (default: the same number).
    """

    def index(at: int) -> int | None:
        return at if position is None else position(at)

    if inputs and isinstance(inputs[0], str):
        truncating = truncate is not None
        plain = max_model_len * CHARS_PER_TOKEN  # (a text this short is bound as it is)
        texts = [
            (prompt or "")
            + (
                text  # (not named for errors it cannot have: most texts)
                if type(text) is str and 0 < len(text) <= plain and not text.isspace()
                else bound_text(
                    tokenizer, str(text), name(start + offset), max_model_len, truncating,
                    index(start + offset), side
                )
            )
            for offset, text in enumerate(inputs)
        ]  # fmt: skip
        # Cutting from the left cuts the text, never the prompt before it.
        id_lists = tokenizer.encode_batch(
            texts,
            truncate_to=truncate,
            side=side,
            keep_leading_chars=len(prompt or ""),
            add_special_tokens=add_special_tokens,
        )
    else:
        id_lists = [list(ids) for ids in inputs]  # type: ignore[arg-type]
        for ids in id_lists:
            tokenizer.check_token_ids(ids, param="input")
        if truncate is not None:
            id_lists = [ids[-truncate:] if side == "left" else ids[:truncate] for ids in id_lists]
    for offset, ids in enumerate(id_lists):
        if len(ids) > max_model_len:
            check_length(len(ids), name(start + offset), max_model_len, index(start + offset))
    return [TokenizedText(ids, None, head) for ids in id_lists]


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Unit vectors along the last axis (zero vectors stay zero)."""
    # np.linalg.norm's own arithmetic for real arrays (the same bits), without its checks.
    norms = np.sqrt(np.add.reduce(vectors * vectors, axis=-1, keepdims=True))
    result: np.ndarray = vectors / np.maximum(norms, 1e-12)
    return result


class HasInputs(Protocol):
    @property
    def inputs(self) -> Sequence[object]: ...


RequestT = TypeVar("RequestT", bound=HasInputs)


class InputsTask(Generic[RequestT]):
    """The first stages of every task whose request is a list of inputs, one item each: texts
    (tokenized) or token-id lists (checked), run through the head `head_for` names."""

    head: Head = "embed"

    def __init__(self, *, max_model_len: int) -> None:
        self.max_model_len = max_model_len

    def head_for(self, ctx: ServeContext[RequestT]) -> Head:
        return self.head

    def inputs(self, ctx: ServeContext[RequestT]) -> Sequence[object]:
        """Texts or token-id lists (an embedding request's may be conversations)."""
        return ctx.request.inputs

    def preprocess(
        self,
        ctx: ServeContext[RequestT],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[str] | Sequence[list[int]],
    ) -> Sequence[TokenizedText | Parts]:
        return tokenize_inputs(
            tokenizer,
            inputs,
            start,
            truncate=ctx.pooling_params.truncate_prompt_tokens,
            max_model_len=self.max_model_len,
            head=self.head_for(ctx),
            side=ctx.pooling_params.truncation_side,
        )
