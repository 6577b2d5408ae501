"""The embedding task's own logic: option checks, post-processing and the response bytes."""

from __future__ import annotations

import base64

import numpy as np
import orjson
import pytest

from poolserve.apis.openai_wire import embeddings_body
from poolserve.engine.context import PoolingParams, ServeContext
from poolserve.tasks.embed import EmbedRequest, EmbedTask


def context(params: PoolingParams) -> ServeContext[EmbedRequest]:
    return ServeContext(
        EmbedRequest(["a", "b", "c"]),
        model_name="the-model",
        pooling_params=params,
        request_id="rid",
    )


OUTPUTS = [row for row in np.random.default_rng(0).normal(size=(3, 384)).astype(np.float32) * 4]


@pytest.mark.parametrize("dimensions", [None, 1, 64, 384])
@pytest.mark.parametrize("normalize", [True, False])
def test_postprocess_slices_then_normalizes(dimensions: int | None, normalize: bool) -> None:
    task = EmbedTask(max_model_len=256)
    ctx = context(PoolingParams(normalize=normalize, dimensions=dimensions))
    result = task.postprocess(ctx, OUTPUTS)
    expected = np.stack(OUTPUTS).astype(np.float64)[:, : dimensions or 384]
    if normalize:
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert result.dtype == np.float32
    np.testing.assert_allclose(result, expected, rtol=1e-6, atol=1e-7)


def test_float_and_base64_responses_carry_the_same_vectors() -> None:
    task = EmbedTask(max_model_len=256)
    ctx_float = context(PoolingParams())
    result = task.postprocess(ctx_float, OUTPUTS)
    as_float = orjson.loads(embeddings_body(ctx_float, result, encoding_format="float"))
    as_b64 = orjson.loads(embeddings_body(ctx_float, result, encoding_format="base64"))

    for body in (as_float, as_b64):
        assert body["object"] == "list"
        assert body["model"] == "the-model"
        assert body["id"].endswith("rid")
        # Token counts are checked end to end in tests/api (they depend on tokenization).
        assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"]
        assert [d["index"] for d in body["data"]] == [0, 1, 2]
        assert all(d["object"] == "embedding" for d in body["data"])
    floats = np.array([d["embedding"] for d in as_float["data"]], dtype=np.float32)
    decoded = np.stack(
        [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in as_b64["data"]]
    )
    np.testing.assert_array_equal(floats, result)  # float32 survives the JSON round trip
    np.testing.assert_array_equal(decoded, result)
