"""The memo of what a model makes of requests' options (service/model_service.py's `Memo`):
made once a key, errors never kept, bounded."""

from __future__ import annotations

import pytest

from poolserve import Engine
from poolserve.engine.context import PoolingOptions
from poolserve.errors import InvalidRequestError
from poolserve.service.model_service import Memo


def test_a_value_is_made_once_a_key() -> None:
    memo, made = Memo(8), []

    def make(key: str) -> str:
        made.append(key)
        return key.upper()

    assert [memo.get(key, lambda key=key: make(key)) for key in "abab"] == ["A", "B", "A", "B"]
    assert made == ["a", "b"]


def test_an_error_is_raised_each_time_and_never_kept() -> None:
    memo, tries = Memo(8), []

    def refuse() -> str:
        tries.append(1)
        raise InvalidRequestError("dimensions must be between 1 and 256")

    for _ in range(2):
        with pytest.raises(InvalidRequestError):
            memo.get("bad", refuse)
    assert len(tries) == 2 and len(memo) == 0


def test_past_its_size_the_memory_starts_again() -> None:
    memo = Memo(3)
    for key in range(3):
        memo.get(key, lambda key=key: key)
    assert len(memo) == 3
    assert memo.get(3, lambda: 3) == 3 and len(memo) == 1


def test_options_equal_in_value_but_not_in_type_are_remembered_apart(engine: Engine) -> None:
    """The Python API passes options unchecked: a float's pooling (which fails its own call
    later) must not be what a later call with the int gets."""
    service = engine.service
    as_float = service.pooling_params(PoolingOptions(dimensions=128.0))  # type: ignore[arg-type]
    as_int = service.pooling_params(PoolingOptions(dimensions=128))
    assert type(as_float.dimensions) is float and type(as_int.dimensions) is int
