"""Late interaction beyond the default tiny model: PyLate's query expansion and skiplist, and the
same weights in Stanford ColBERT's layout (HF_ColBERT + `linear` head + artifact.metadata)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.api.helpers import load_engine, post_ok, serving
from tests.tiny_models import colbert_reference_scores, make_colbert, make_stanford_colbert

pytestmark = pytest.mark.anyio

QUERY = "what is the capital of france?"
DOCUMENTS = [
    "paris is the capital of france.",
    "berlin, the capital of germany, is large!",
    "the weather today: sunny; warm.",
]


@pytest.fixture(scope="module")
def pylate_expanded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pylate-expanded")
    return make_colbert(directory, query_expansion=True, skiplist=True)


@pytest.fixture(scope="module")
def stanford_dir(tmp_path_factory: pytest.TempPathFactory, pylate_expanded_dir: Path) -> Path:
    return make_stanford_colbert(tmp_path_factory.mktemp("stanford"), pylate_expanded_dir)


async def _scores(directory: Path) -> tuple[np.ndarray, dict[str, object]]:
    engine = load_engine(directory)
    try:
        async with serving(engine) as client:
            body = await post_ok(client, "/score", {"queries": QUERY, "documents": DOCUMENTS})
            models = (await client.get("/v1/models")).json()
    finally:
        engine.close()
    return np.array([entry["score"] for entry in body["data"]]), models


async def test_pylate_query_expansion_and_skiplist_match_the_reference(
    pylate_expanded_dir: Path,
) -> None:
    scores, _ = await _scores(pylate_expanded_dir)
    expected = colbert_reference_scores(pylate_expanded_dir, QUERY, DOCUMENTS)
    np.testing.assert_allclose(scores, expected, rtol=1e-4)


async def test_stanford_layout_scores_like_the_same_weights_in_pylate(
    stanford_dir: Path, pylate_expanded_dir: Path
) -> None:
    scores, models = await _scores(stanford_dir)
    expected = colbert_reference_scores(pylate_expanded_dir, QUERY, DOCUMENTS)
    np.testing.assert_allclose(scores, expected, rtol=1e-4)
    # doc_maxlen counts the marker: the tokenizer's output may hold one token less.
    assert models["data"][0]["max_model_len"] == 179  # type: ignore[index]


async def test_stanford_layout_without_linear_head_is_a_load_error(
    tmp_path: Path, stanford_dir: Path
) -> None:
    import shutil

    from safetensors.torch import load_file, save_file

    from poolserve.errors import ModelLoadError

    broken = tmp_path / "no-head"
    shutil.copytree(stanford_dir, broken)
    weights = load_file(str(broken / "model.safetensors"))
    del weights["linear.weight"]
    save_file(weights, str(broken / "model.safetensors"))
    with pytest.raises(ModelLoadError, match=r"linear\.weight"):
        load_engine(broken)
