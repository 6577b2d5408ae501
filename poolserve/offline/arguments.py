"""The Python API's arguments checked and turned into a request's inputs, with errors in
Python's terms (TypeError for what is not text, InvalidRequestError naming the argument)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from poolserve.errors import InvalidRequestError

Document = str | Mapping[str, str]


def texts_of(texts: str | Sequence[Document], argument: str) -> list[str]:
    """The argument as a list of strings: one string is one text; a mapping with a `text` key
    (a rerank document) is its text; anything else is a TypeError naming where it is."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, Mapping) or not isinstance(texts, Iterable):
        raise TypeError(f"{argument} must be a str or a list of str, got {type(texts).__name__}")
    inputs: list[str] = []
    for index, item in enumerate(texts):
        text = item.get("text") if isinstance(item, Mapping) and argument == "documents" else item
        if not isinstance(text, str):
            shape = "a str or a mapping with a 'text' str" if argument == "documents" else "a str"
            raise TypeError(f"{argument}[{index}] must be {shape}, got {type(text).__name__}")
        inputs.append(text)
    if not inputs:
        raise InvalidRequestError(f"{argument} is empty; pass at least one text")
    return inputs


def check_rerank(query: str, top_n: int | None) -> None:
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    if top_n is not None and top_n < 0:
        raise InvalidRequestError(f"top_n must be 0 or more (0 or None: all), got {top_n}")
