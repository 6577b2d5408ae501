"""Image-text models (CLIP, SigLIP 2, sentence-transformers' CLIP layout): text and image vectors
in one space, equal to transformers' `get_text_features` / `get_image_features` (and to
sentence-transformers for its own layout), through the Python API and `/v1/embeddings` (inputs
`{"image": ...}` and vLLM's `image_url` message parts); every bad image fails only its request,
with a 400 (413 for too many pixels, bytes or images) that names it."""

from __future__ import annotations

import asyncio
import base64
import struct
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from poolserve import Engine, ModelConfig, ServerConfig
from tests.api.helpers import assert_openai_error, embed, load_engine, serving, vectors
from tests.reference import assert_close_vectors, norms
from tests.vision_zoo import (
    CAPTIONS,
    data_uri,
    encoded,
    image_features,
    make_clip_vit_b_32_sentence_transformers,
    make_clip_vit_base_patch32,
    make_siglip2_base_patch16_224,
    photo_paths,
    sample_images,
    text_features,
)

pytestmark = pytest.mark.anyio

MODELS = {"clip": make_clip_vit_base_patch32, "siglip2": make_siglip2_base_patch16_224}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return (a64 * b64).sum(1) / np.linalg.norm(a64, axis=1) / np.linalg.norm(b64, axis=1)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vision")
    dirs = {name: make(root / name) for name, make in MODELS.items()}
    dirs["st-clip"] = make_clip_vit_b_32_sentence_transformers(root / "st-clip")
    return dirs


@pytest.fixture(scope="module")
def clip(model_dirs: dict[str, Path]) -> Iterator[Engine]:
    with load_engine(model_dirs["clip"]) as engine:
        yield engine


@pytest.fixture
async def clip_client(clip: Engine, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = ServerConfig(max_images_per_request=8, allowed_local_media_path=str(tmp_path))
    async with serving(clip, config) as client:
        yield client


@pytest.mark.parametrize("name", sorted(MODELS))
def test_text_and_image_vectors_are_transformers_features(
    name: str, model_dirs: dict[str, Path], clip: Engine
) -> None:
    directory = model_dirs[name]
    images = sample_images()
    expected_texts = text_features(directory, CAPTIONS)
    expected_images = image_features(directory, images)
    engine = clip if name == "clip" else load_engine(directory)
    try:
        texts = engine.embed(list(CAPTIONS), normalize=False)
        # Paths, file bytes and PIL images are the same image.
        from_pil = engine.embed_images(images, normalize=False)
        paths = photo_paths()
        from_paths = engine.embed_images(paths, normalize=False)
        from_bytes = engine.embed_images([p.read_bytes() for p in paths], normalize=False)
        normalized = engine.embed_images(images[:2])
    finally:
        if engine is not clip:
            engine.close()
    assert cosines(texts, expected_texts).min() >= 0.99999
    assert cosines(from_pil, expected_images).min() >= 0.99999
    np.testing.assert_allclose(from_paths, from_pil[: len(paths)], rtol=0, atol=1e-6)
    np.testing.assert_allclose(from_bytes, from_paths, rtol=0, atol=1e-6)
    # One space: a text's similarity to an image is the references'.
    ours = (
        texts
        @ from_pil.T
        / np.outer(np.linalg.norm(texts, axis=1), np.linalg.norm(from_pil, axis=1))
    )
    theirs = (
        expected_texts
        @ expected_images.T
        / np.outer(np.linalg.norm(expected_texts, axis=1), np.linalg.norm(expected_images, axis=1))
    )
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    # By default a plain transformers directory's vectors are unit vectors (as texts').
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=1), 1.0, atol=1e-5)


def test_sentence_transformers_clip_layout_gives_sentence_transformers_vectors(
    model_dirs: dict[str, Path],
) -> None:
    from sentence_transformers import SentenceTransformer

    directory = model_dirs["st-clip"]
    images = [image.convert("RGB") for image in sample_images()]
    reference = SentenceTransformer(str(directory), device="cpu")
    expected_texts = reference.encode(list(CAPTIONS), convert_to_numpy=True)
    expected_images = reference.encode(images, convert_to_numpy=True)
    with load_engine(directory) as engine:
        # Its modules.json has no Normalize: its vectors are not normalized, as there.
        for ours, theirs in (
            (engine.embed(list(CAPTIONS)), expected_texts),
            (engine.embed_images(images), expected_images),
        ):
            assert_close_vectors(ours, theirs)
            np.testing.assert_allclose(norms(ours), norms(theirs), rtol=1e-4)


def test_bfloat16_vectors_keep_the_float32_direction(model_dirs: dict[str, Path]) -> None:
    directory = model_dirs["clip"]
    images = sample_images()
    config = ModelConfig(model=str(directory), dtype="bfloat16")
    with Engine(model_config=config) as engine:
        texts = engine.embed(list(CAPTIONS))
        pictures = engine.embed_images(images)
    assert cosines(texts, text_features(directory, CAPTIONS)).min() >= 0.999
    assert cosines(pictures, image_features(directory, images)).min() >= 0.999


async def test_images_among_the_inputs_of_v1_embeddings(
    clip_client: httpx.AsyncClient, clip: Engine
) -> None:
    images = sample_images()
    expected = clip.embed_images(images[:2])
    text = clip.embed([CAPTIONS[0]])
    body = await embed(
        clip_client,
        input=[{"image": data_uri(images[0], "JPEG")}, CAPTIONS[0], {"image": data_uri(images[1])}],
    )
    got = vectors(body)
    # JPEG re-encoding changes pixels a little; the PNG is the image itself.
    assert cosines(got[:1], expected[:1]).min() >= 0.99
    assert_close_vectors(got[1:2], text)
    assert_close_vectors(got[2:], expected[1:])
    tokens = len(clip.core.tokenizer().encode_batch([CAPTIONS[0]], truncate_to=None)[0])
    assert body["usage"]["prompt_tokens"] == tokens + 2 * 50  # 7 × 7 patches and CLIP's class token
    # One image alone, base64 answers, and vLLM's chat form with an image_url part.
    single = await embed(
        clip_client, input={"image": data_uri(images[1])}, encoding_format="base64"
    )
    decoded = np.frombuffer(base64.b64decode(single["data"][0]["embedding"]), dtype="<f4")
    assert_close_vectors(decoded[None], expected[1:])
    part = {"type": "image_url", "image_url": {"url": data_uri(images[1])}}
    chat = await embed(clip_client, messages=[{"role": "user", "content": [part]}])
    assert_close_vectors(vectors(chat), expected[1:])


async def test_local_paths_only_under_the_allowed_folder(
    clip_client: httpx.AsyncClient, clip: Engine, tmp_path: Path
) -> None:
    image = sample_images()[1]
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "flower.png").write_bytes(encoded(image))
    outside = tmp_path.parent / f"{tmp_path.name}-outside.png"
    outside.write_bytes(encoded(image))
    (tmp_path / "photos" / "link.png").symlink_to(outside)
    body = await embed(clip_client, input=[{"image": "photos/flower.png"}])
    assert_close_vectors(vectors(body), clip.embed_images([image]))
    for path in ("../" + outside.name, str(outside), "photos/link.png", "file://" + str(outside)):
        response = await clip_client.post("/v1/embeddings", json={"input": [{"image": path}]})
        error = assert_openai_error(response, 400)
        assert "outside the folder" in error["message"], error


async def test_every_bad_image_fails_only_its_own_request(
    clip_client: httpx.AsyncClient, clip: Engine
) -> None:
    good = sample_images()[1]
    png = encoded(good)
    frames = [good.resize((32, 32)), good.resize((32, 32)).rotate(90)]
    gif = _encoded_animation(frames)
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect/></svg>'

    def uri(data: bytes, mime: str = "image/png") -> str:
        return f"data:{mime};base64,{base64.b64encode(data).decode()}"

    cases: list[tuple[Any, int, str]] = [
        (uri(png[: len(png) // 2]), 400, "damaged or cut short"),
        (uri(svg, "image/svg+xml"), 400, "SVG"),
        (uri(svg), 400, "SVG"),
        (uri(gif, "image/gif"), 400, "animated"),
        (uri(b"plain words", "text/plain"), 400, "not an image"),
        ("data:image/png;base64,@@not base64@@", 400, "base64"),
        ("data:image/png,raw", 400, "without base64"),
        (uri(_png_header_only(50_000, 50_000)), 413, "--max-image-pixels"),
        (uri(encoded(Image.new("RGB", (1, 100_000)))), 413, "crop it nearer to a square"),
        # A strip's shape is refused from its header: cut short, it is still a 413.
        (uri(encoded(Image.new("RGB", (1, 100_000)))[:400]), 413, "crop it nearer to a square"),
        ("gopher://images.example.com/cat.png", 400, "http and https only"),
        ("https://images.example.com/cat.png", 400, "--allowed-media-domains"),
        ("http://127.0.0.1:9/cat.png", 400, "--allowed-media-domains"),
    ]
    bomb = _png_header_only(50_000, 50_000)
    assert len(bomb) < 1024  # a kilobyte that claims 2.5 gigapixels
    good_body = {"input": [CAPTIONS[1], {"image": uri(png)}]}
    expected = vectors(await embed(clip_client, **good_body))
    for source, status, words in cases:
        bad = {"input": ["a text first", {"image": source}]}
        # A bad request beside a good one, at once: only the bad one fails.
        bad_response, good_response = await asyncio.gather(
            clip_client.post("/v1/embeddings", json=bad),
            clip_client.post("/v1/embeddings", json=good_body),
        )
        error = assert_openai_error(bad_response, status)
        assert "input 1" in error["message"] and words in error["message"], (source[:40], error)
        assert error["param"] == "input"
        assert good_response.status_code == 200
        assert_close_vectors(vectors(good_response.json()), expected)


async def test_images_per_request_are_bounded_and_text_models_take_none(
    clip_client: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    image = {"image": data_uri(sample_images()[4])}
    response = await clip_client.post("/v1/embeddings", json={"input": [image] * 9})
    error = assert_openai_error(response, 413)
    assert "9 images" in error["message"] and "--max-images-per-request" in error["message"]
    # The bundled text model: an image is a 400 that says which models take images.
    response = await client.post("/v1/embeddings", json={"input": ["a text", image]})
    error = assert_openai_error(response, 400)
    assert "input 1 is an image" in error["message"] and "text only" in error["message"]
    part = {"type": "image_url", "image_url": {"url": image["image"]}}
    response = await client.post(
        "/v1/embeddings", json={"messages": [{"role": "user", "content": [part]}]}
    )
    assert "text only" in assert_openai_error(response, 400)["message"]


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims `width` × `height` pixels, with one tiny compressed row."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = zlib.compress(b"\x00" * 64)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")
    )


def _encoded_animation(frames: list[Any]) -> bytes:
    import io

    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def image_site() -> Iterator[str]:
    """A loopback HTTP server: /flower.png, /big.png (a larger file), /to-localhost (a
    redirect to the same file by another name), /hangs (never answers until the end)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    flower = encoded(sample_images()[1])
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            port = self.server.server_address[1]
            if self.path == "/hangs":
                release.wait()
                return
            if self.path == "/broken-redirect":
                self.send_response(302)
                self.send_header("Location", "http://localhost:99999/flower.png")
                self.end_headers()
                return
            if self.path == "/to-localhost":
                self.send_response(302)
                self.send_header("Location", f"http://localhost:{port}/flower.png")
                self.end_headers()
                return
            body = {"/flower.png": flower, "/big.png": flower * 4}.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    release.set()
    server.shutdown()


async def test_urls_are_fetched_only_from_named_hosts_and_never_to_loopback_unnamed(
    clip: Engine, image_site: str
) -> None:
    expected = clip.embed_images([sample_images()[1]])
    url = f"{image_site}/flower.png"

    async def post(config: ServerConfig, source: str) -> httpx.Response:
        async with serving(clip, config) as client:
            return await client.post("/v1/embeddings", json={"input": [{"image": source}]})

    # Named exactly, the loopback host is fetched; the vector is the image's.
    named = ServerConfig(
        allowed_media_domains=("127.0.0.1",), max_image_bytes=len(encoded(sample_images()[1])) + 1
    )
    response = await post(named, url)
    assert response.status_code == 200, response.text
    assert_close_vectors(vectors(response.json()), expected)
    refusals = [
        # Another host named: 127.0.0.1 is not fetched.
        (
            ServerConfig(allowed_media_domains=("images.example.com",)),
            url,
            400,
            "not in --allowed-media-domains",
        ),
        # A wildcard that matches localhost never reaches a loopback address.
        (
            ServerConfig(allowed_media_domains=(".localhost",)),
            url.replace("127.0.0.1", "localhost"),
            400,
            "loopback",
        ),
        # A redirect to a host not named is not followed.
        (named, f"{image_site}/to-localhost", 400, "localhost is not in --allowed-media-domains"),
        (named, f"{image_site}/big.png", 413, "--max-image-bytes"),
        (named, f"{image_site}/missing.png", 400, "answered 404"),
        (replace_timeout(named, 0.5), f"{image_site}/hangs", 400, "took more than 0.5 s"),
        (named, url.replace("http://", "http://user:secret@"), 400, "credentials"),
    ]
    for config, source, status, words in refusals:
        error = assert_openai_error(await post(config, source), status)
        assert "input 0" in error["message"] and words in error["message"], (source, error)


async def test_a_malformed_image_url_is_a_400_naming_the_field_on_every_route(
    clip: Engine, image_site: str
) -> None:
    """Bad ports, a NUL, a control character, an enormous URL: never a 500, and the error
    repeats a bounded prefix of what was sent (a redirect's Location goes the same way)."""
    config = ServerConfig(allowed_media_domains=("127.0.0.1", "localhost"))
    long = f"{image_site}/{'x' * 100_000}.png"
    sources = [
        "http://localhost:99999/x.png",
        "http://localhost:abc/x.png",
        "http://localhost:-1/x.png",
        f"{image_site}/x\x00.png",
        f"{image_site}/x\x01.png",
        "http://[x/a.png",
        "ftp://[x/a.png",
        f"{image_site}/broken-redirect",
        long,
    ]
    async with serving(clip, config) as client:
        for source in sources:
            for path, body, param in (
                ("/v1/embeddings", {"input": [{"image": source}]}, "input"),
                ("/rerank", {"query": CAPTIONS[0], "documents": [{"image": source}]}, "documents"),
                (
                    "/score",
                    {"queries": CAPTIONS[0], "documents": {"content": [image_part(source)]}},
                    "documents",
                ),
                (
                    "/v1/embeddings",
                    {"messages": [{"role": "user", "content": [image_part(source)]}]},
                    "messages",
                ),
            ):
                response = await client.post(path, json=body)
                error = assert_openai_error(response, 400)
                assert "not a valid URL" in error["message"], (source[:60], error)
                assert error["message"].count("send it as a data URI") == 1, error
                assert error["param"] == param, (path, error)
                assert len(error["message"]) < 1000, len(error["message"])
        # A refusal keeps its own reason, however long the URL.
        far = f"http://images.example.org/{'y' * 300}.png"
        response = await client.post("/v1/embeddings", json={"input": [{"image": far}]})
        error = assert_openai_error(response, 400)
        assert "images.example.org is not in --allowed-media-domains" in error["message"], error
        assert "not a valid URL" not in error["message"], error
        # A bad image is named where it lies: among the documents (not the query), under the
        # field the body used, in a message's content.
        bad = "data:image/png;base64,@@not base64@@"
        chat = [{"role": "user", "content": [{"type": "text", "text": ""}, image_part(bad)]}]
        for path, body, param, where in (
            (
                "/rerank",
                {"query": CAPTIONS[0], "documents": [CAPTIONS[1], {"image": bad}]},
                "documents",
                "documents[1]",
            ),
            (
                "/score",
                {"queries": CAPTIONS[0], "documents": {"content": [image_part(bad)]}},
                "documents",
                "documents[0]",
            ),
            (
                "/score",
                {"text_1": CAPTIONS[0], "text_2": {"content": [image_part(bad)]}},
                "text_2",
                "text_2[0]",
            ),
            ("/v1/embeddings", {"messages": chat}, "messages", "messages[0].content[1]"),
        ):
            error = assert_openai_error(await client.post(path, json=body), 400)
            assert error["param"] == param and where in error["message"], (path, error)


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def replace_timeout(config: ServerConfig, seconds: float) -> ServerConfig:
    from dataclasses import replace

    return replace(config, media_fetch_timeout=seconds)


async def test_rerank_ranks_image_documents_against_a_text_query(
    clip_client: httpx.AsyncClient, clip: Engine
) -> None:
    images = sample_images()[:3]
    query = CAPTIONS[1]
    documents: list[Any] = [{"image": data_uri(image)} for image in images] + [CAPTIONS[2]]
    response = await clip_client.post(
        "/rerank", json={"query": query, "documents": documents, "return_documents": True}
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    text = clip.embed([query])[0].astype(np.float64)
    others = np.concatenate([clip.embed_images(images), clip.embed([CAPTIONS[2]])]).astype(
        np.float64
    )
    expected = others @ text / np.linalg.norm(others, axis=1) / np.linalg.norm(text)
    assert [r["index"] for r in results] == list(np.argsort(-expected, kind="stable"))
    np.testing.assert_allclose(
        [r["relevance_score"] for r in results], np.sort(expected)[::-1], atol=1e-5
    )
    by_index = {r["index"]: r["document"] for r in results}
    assert by_index[0] == {"image": documents[0]["image"]} and by_index[3] == {"text": CAPTIONS[2]}


async def test_cohere_embed_takes_images_and_inputs(
    clip_client: httpx.AsyncClient, clip: Engine
) -> None:
    images = sample_images()[:2]
    uris = [data_uri(image) for image in images]
    expected = clip.embed_images(images)
    response = await clip_client.post(
        "/v2/embed", json={"images": uris, "input_type": "image", "embedding_types": ["float"]}
    )
    assert response.status_code == 200, response.text
    assert_close_vectors(np.array(response.json()["embeddings"]["float"]), expected)
    content = [
        {"content": [{"type": "image_url", "image_url": {"url": uris[0]}}]},
        {"content": [{"type": "text", "text": CAPTIONS[0]}]},
    ]
    response = await clip_client.post("/v2/embed", json={"inputs": content})
    assert response.status_code == 200, response.text
    body = response.json()
    got = np.array(body["embeddings"]["float"])
    assert_close_vectors(got[:1], expected[:1])
    assert_close_vectors(got[1:], clip.embed([CAPTIONS[0]]))
    assert body["texts"] == [CAPTIONS[0]]
    both = await clip_client.post("/v2/embed", json={"texts": ["a"], "images": uris})
    assert "send one of texts, images or inputs" in assert_openai_error(both, 400)["message"]


async def test_score_scores_image_documents_against_text_queries(
    clip_client: httpx.AsyncClient, clip: Engine
) -> None:
    images = sample_images()[:2]
    parts = [{"type": "image_url", "image_url": {"url": data_uri(image)}} for image in images]
    parts.append({"type": "text", "text": CAPTIONS[3]})
    response = await clip_client.post(
        "/score", json={"queries": CAPTIONS[1], "documents": {"content": parts}}
    )
    assert response.status_code == 200, response.text
    got = [item["score"] for item in response.json()["data"]]
    query = clip.embed([CAPTIONS[1]])[0].astype(np.float64)
    others = np.concatenate([clip.embed_images(images), clip.embed([CAPTIONS[3]])])
    expected = others.astype(np.float64) @ query / np.linalg.norm(others, axis=1)
    np.testing.assert_allclose(got, expected / np.linalg.norm(query), atol=1e-5)


async def test_admission_prices_an_image_by_what_its_pixels_hold(clip: Engine) -> None:
    from poolserve.inputs.image_processor import image_held_bytes

    vision = clip.service.core.model.layout.vision
    assert vision is not None
    # The tiny model's 16 floats cost 128 + 5 × 16 bytes a token: 3 × 224² float32 pixels hold
    # far more than its 50 tokens.
    assert vision.image_tokens == 50
    assert image_held_bytes(vision) == 4 * (3 * 224 * 224 + 16)
    admitted = -(-image_held_bytes(vision) // (128 + 5 * 16))
    config = ServerConfig(
        max_request_tokens=2 * admitted, max_queued_tokens=4 * admitted, max_client_batch_size=64
    )
    image = {"image": data_uri(sample_images()[-1])}  # 48 × 40: its body costs less
    async with serving(clip, config) as client:
        assert (await client.post("/v1/embeddings", json={"input": [image] * 2})).status_code == 200
        response = await client.post("/v1/embeddings", json={"input": [image] * 3})
        error = assert_openai_error(response, 413)
        assert f"costs {3 * admitted} tokens" in error["message"], error


def test_a_bulk_job_embeds_a_folder_of_images_and_a_field_of_image_paths(
    clip: Engine, tmp_path: Path
) -> None:
    import json
    import shutil

    import pyarrow.dataset as ds

    from poolserve.bulk.corpus import InputSpec, input_format
    from poolserve.bulk.job import run_job
    from poolserve.config.job_config import JobOptions

    folder = tmp_path / "photos"
    (folder / "more").mkdir(parents=True)
    paths = photo_paths()
    for index, path in enumerate(paths):
        shutil.copy(path, folder / ("more" if index % 2 else "") / path.name)
    (folder / "broken.png").write_bytes(encoded(sample_images()[1])[:500])
    (folder / "notes.txt").write_text("not an image")  # not an image file: left alone
    assert input_format(str(folder), None) == "images"
    report = run_job(clip, InputSpec(str(folder), "images"), tmp_path / "out.parquet", JobOptions())
    table = ds.dataset(tmp_path / "out.parquet").to_table()
    ids = table.column("id").to_pylist()
    files = {
        p.relative_to(folder).as_posix(): p
        for p in folder.rglob("*")
        if p.is_file() and p.suffix != ".txt"
    }
    assert ids == sorted(set(files) - {"broken.png"})
    expected = clip.embed_images([files[name] for name in ids])
    assert_close_vectors(np.array(table.column("embedding").to_pylist()), expected)
    assert (report.embedded, report.bad) == (len(paths), 1)
    errors = [json.loads(line) for line in Path(report.errors_file or "").read_text().splitlines()]
    assert [(e["id"], e["file"]) for e in errors] == [("broken.png", 1)]
    assert errors[0]["reason"].startswith("the image cannot be decoded")
    # A field of paths, relative to the input file's folder; a missing file is a bad row.
    listing = tmp_path / "images.jsonl"
    rows = [{"path": "photos/" + name} for name in ids[:2]] + [{"path": "photos/missing.png"}]
    listing.write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = InputSpec(str(listing), "jsonl", image_field="path")
    report = run_job(clip, spec, tmp_path / "listed.npy", JobOptions())
    assert_close_vectors(np.load(tmp_path / "listed.npy"), expected[:2])
    errors = [json.loads(line) for line in Path(report.errors_file or "").read_text().splitlines()]
    assert [(e["id"], e["line"]) for e in errors] == [(2, 3)]
    assert "No such file" in errors[0]["reason"]
