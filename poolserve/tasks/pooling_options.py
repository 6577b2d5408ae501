"""A request's pooling options checked against the model, and their meaning filled in: the one
resolver every entrance (each HTTP family, the Python API, bulk jobs) hands its options to."""

from __future__ import annotations

from typing import Protocol

from poolserve.engine.context import PoolingOptions, PoolingParams
from poolserve.errors import InvalidRequestError


class PooledModel(Protocol):
    """What the resolver needs to know of a model (a `ModelService` is one)."""

    @property
    def max_model_len(self) -> int: ...

    @property
    def embedding_dim(self) -> int: ...

    @property
    def num_special_tokens(self) -> int: ...

    @property
    def normalizes(self) -> bool:
        """Whether its pooled vectors are normalized (a Normalize module, or no ST modules)."""
        ...

    @property
    def default_dimensions(self) -> int | None:
        """The Matryoshka dimension a request gets when it names none (its truncate_dim)."""
        ...


def resolve_pooling(options: PoolingOptions, model: PooledModel) -> PoolingParams:
    """Check `options` against `model` and fill in their meaning.

    `normalize` None follows the model's configuration (a sentence-transformers Normalize module,
    or normalization for a plain transformers directory), as sentence-transformers would, except
    that a Matryoshka slice (`dimensions`, or the model's `truncate_dim` by default) is
    re-normalized: a slice of a unit vector is not one, and clients compare by dot product.
    """
    dimensions = options.dimensions
    if dimensions is not None and not 1 <= dimensions <= model.embedding_dim:
        raise InvalidRequestError(
            f"dimensions must be between 1 and {model.embedding_dim} for this model, got "
            f"{dimensions}",
            param="dimensions",
        )
    if dimensions is None and model.default_dimensions is not None:
        dimensions = min(model.default_dimensions, model.embedding_dim)
    normalize = options.normalize
    return PoolingParams(
        normalize=(model.normalizes or dimensions is not None) if normalize is None else normalize,
        use_activation=options.use_activation,
        dimensions=dimensions,
        truncate_prompt_tokens=_truncation(options.truncate_prompt_tokens, model),
        truncation_side=options.truncation_side,
    )


def _truncation(truncate: int | None, model: PooledModel) -> int | None:
    """`truncate_prompt_tokens` resolved: None, no truncation; -1, the model's maximum."""
    if truncate is None:
        return None
    if truncate == -1:
        return model.max_model_len
    if truncate > model.max_model_len:
        raise InvalidRequestError(
            f"truncate_prompt_tokens ({truncate}) is more than the model's maximum length "
            f"({model.max_model_len}); pass at most {model.max_model_len}, or -1 for the maximum",
            param="truncate_prompt_tokens",
        )
    least = max(model.num_special_tokens, 1)
    if truncate < least:
        raise InvalidRequestError(
            f"truncate_prompt_tokens must be -1 or at least {least} (the model's special tokens "
            f"count), got {truncate}",
            param="truncate_prompt_tokens",
        )
    return truncate
