"""The one resolver of a request's pooling options: each checked against the model, its meaning
filled in (the model's normalization and truncate_dim, -1 as the model's length)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from poolserve.engine.context import PoolingOptions, PoolingParams
from poolserve.errors import InvalidRequestError
from poolserve.tasks.pooling_options import resolve_pooling


@dataclass(frozen=True)
class Model:
    """all-MiniLM-L6-v2's facts (a `PooledModel`)."""

    max_model_len: int = 256
    embedding_dim: int = 384
    num_special_tokens: int = 2
    normalizes: bool = True
    default_dimensions: int | None = None


def resolve(model: Model = Model(), **options: object) -> PoolingParams:
    return resolve_pooling(PoolingOptions(**options), model)  # type: ignore[arg-type]


def test_defaults() -> None:
    assert resolve() == PoolingParams(normalize=True, dimensions=None, truncate_prompt_tokens=None)


@pytest.mark.parametrize(("given", "resolved"), [(-1, 256), (256, 256), (2, 2), (100, 100)])
def test_truncate_prompt_tokens_is_resolved(given: int, resolved: int) -> None:
    assert resolve(truncate_prompt_tokens=given).truncate_prompt_tokens == resolved


@pytest.mark.parametrize(
    ("given", "words"),
    [(257, ["257", "256"]), (1000, ["1000", "256"]), (1, ["at least 2"]), (0, ["at least 2"])],
)
def test_truncate_prompt_tokens_out_of_range(given: int, words: list[str]) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        resolve(truncate_prompt_tokens=given)
    assert caught.value.param == "truncate_prompt_tokens"
    assert all(word in caught.value.message for word in words)


@pytest.mark.parametrize("dimensions", [0, -1, 385, 10_000])
def test_dimensions_out_of_range(dimensions: int) -> None:
    with pytest.raises(InvalidRequestError, match="384") as caught:
        resolve(dimensions=dimensions)
    assert caught.value.param == "dimensions"


@pytest.mark.parametrize("dimensions", [1, 128, 384])
def test_dimensions_in_range(dimensions: int) -> None:
    assert resolve(dimensions=dimensions).dimensions == dimensions


def test_a_matryoshka_slice_is_normalized_again_unless_asked_not_to() -> None:
    """A slice of a unit vector is not one: a model that does not normalize still gets its
    slices normalized, by its own truncate_dim or the request's dimensions."""
    plain = Model(normalizes=False)
    assert resolve(plain).normalize is False
    assert resolve(plain, dimensions=128).normalize is True
    assert resolve(plain, dimensions=128, normalize=False).normalize is False
    by_default = resolve(Model(normalizes=False, default_dimensions=256))
    assert (by_default.dimensions, by_default.normalize) == (256, True)
