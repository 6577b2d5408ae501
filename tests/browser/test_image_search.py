"""The playground's image search against a server of an image-text model (the tiny CLIP): a few
real photos chosen in the page and a text query, ranked as `/rerank` ranks them; the panel is
there only for a model that takes images."""

from __future__ import annotations

import base64
import mimetypes
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page

from tests.browser.helpers import open_playground, post_ok, screenshot
from tests.e2e.harness import Server, running_server
from tests.vision_zoo import photo_paths

pytestmark = [pytest.mark.slow, pytest.mark.browser]

QUERY = "a close-up of a yellow flower"


@pytest.fixture(scope="module")
def clip_server(tmp_path_factory: pytest.TempPathFactory, clip_dir: Path) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("browser-clip"), [str(clip_dir)]) as started:
        yield started


def data_uri(path: Path) -> str:
    """The data URI a browser's FileReader makes of the file."""
    mime = mimetypes.guess_type(path.name)[0]
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def test_images_chosen_in_the_page_are_ranked_as_rerank_ranks_them(
    page: Page, clip_server: Server, screenshots: Path
) -> None:
    paths = photo_paths()
    open_playground(page, clip_server.url)
    assert page.locator("#panel-images").is_visible()
    assert "texts and images" in page.inner_text("#model-info")
    assert page.is_disabled("#btn-image-search")  # no image chosen yet
    page.set_input_files("#image-files", [str(path) for path in paths])
    page.wait_for_selector(f'#image-thumbs[data-count="{len(paths)}"]', state="attached")
    page.fill("#image-query", QUERY)
    page.click("#btn-image-search")
    page.wait_for_selector('#image-results[data-ready="1"]', state="attached")
    shown = page.locator("#image-results li").evaluate_all(
        "items => items.map(item => [Number(item.dataset.index), Number(item.dataset.score)])"
    )
    documents = [{"image": data_uri(path)} for path in paths]
    expected = post_ok(clip_server.url, "/rerank", {"query": QUERY, "documents": documents})
    assert [index for index, _ in shown] == [r["index"] for r in expected["results"]]
    for (_, score), result in zip(shown, expected["results"], strict=True):
        assert score == pytest.approx(result["relevance_score"], abs=1e-6)
    names = page.locator("#image-results li .doc").all_inner_texts()
    assert names == [paths[r["index"]].name for r in expected["results"]]
    screenshot(page, "#panel-images", screenshots, "image-search.png")


def test_the_image_panel_is_hidden_for_a_text_model(page: Page, server: Server) -> None:
    open_playground(page, server.url)
    assert page.locator("#panel-images").is_hidden()
