"""What users build today to serve a static embedding model (issue 61): `model2vec`'s
`StaticModel.encode` called per request, behind FastAPI with a pydantic body, or behind a bare
ASGI callable, each under the same uvicorn settings as `poolserve serve` (uvloop, httptools, no
access log). Both answer OpenAI's `/v1/embeddings` shape. Run by benchmarks/static_models.py:

    .venv/bin/python -m benchmarks.static_peers --app fastapi --model DIR --port 8100

And the floor of poolserve's own design (`--app floor`), what its request path would cost with
nothing but the path: a bare ASGI callable on the same uvicorn that hands each request's texts
to one thread, which takes every request waiting, tokenizes their texts in one call, looks them
up in poolserve's own table (backends/static/lookup.py), normalizes, writes each answer with
orjson and hands the batch's answers back to the loop in one call. No validation, admission,
metrics or errors: a limit to measure poolserve's path against, not a server.
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send


class EmbeddingRequest(BaseModel):
    """OpenAI's request, as a wrapper declares it (at module level: FastAPI resolves it)."""

    input: str | list[str]
    model: str | None = None


def _answer(model_name: str, vectors: Any, tokens: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": vector.tolist()}
            for i, vector in enumerate(vectors)
        ],
        "model": model_name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def fastapi_app(model: Any, name: str) -> Any:
    """The wrapper projects write (nexi-lab/nexus, spiceai): a pydantic body, `encode`, a dict
    FastAPI serializes."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/health")
    def health() -> str:
        return "ok"

    @app.post("/v1/embeddings")
    def embeddings(request: EmbeddingRequest) -> dict[str, Any]:
        texts = [request.input] if isinstance(request.input, str) else request.input
        vectors = model.encode(texts)
        return _answer(name, vectors, sum(len(text.split()) for text in texts))

    return app


async def _health(scope: Scope, send: Send) -> bool:
    """Answer `GET /health` (True), or leave the request to the app (False)."""
    if scope["path"] != "/health":
        return False
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
    return True


async def _texts(receive: Receive) -> list[str]:
    """The body read whole, and its `input` as a list of texts."""
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    given = orjson.loads(body)["input"]
    return [given] if isinstance(given, str) else given


async def _send_json(send: Send, answer: bytes) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(answer)),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


def bare_app(model: Any, name: str) -> Any:
    """A bare ASGI callable: the body read, `encode`, orjson's bytes."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or await _health(scope, send):
            return
        texts = await _texts(receive)
        vectors = model.encode(texts)
        await _send_json(
            send, orjson.dumps(_answer(name, vectors, sum(len(t.split()) for t in texts)))
        )

    return app


def floor_app(folder: str, name: str) -> Any:
    """The floor of poolserve's design (the module's docstring): the loop reads and parses,
    one thread batches tokenizing, lookup and answers, the loop sends."""
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # as `poolserve serve` runs it
    import asyncio
    import threading
    from pathlib import Path

    import numpy as np
    from tokenizers import Tokenizer

    from poolserve.backends.static.lookup import LoadedTable
    from poolserve.models.static_layout import plain_tokenizer_json, read_static

    static = read_static(Path(folder), Path(folder), None)
    table = LoadedTable.load(static)
    # Without special tokens, as model2vec and poolserve tokenize (its texts are sentences,
    # well within max_length: nothing is cut).
    tokenizer = Tokenizer.from_str(plain_tokenizer_json(static.tokenizer_file.read_text()))
    waiting: list[tuple[asyncio.Future[bytes], list[str]]] = []
    arrived = threading.Condition()
    loops: list[asyncio.AbstractEventLoop] = []

    def answered(answers: list[tuple[asyncio.Future[bytes], bytes]]) -> None:
        for future, body in answers:
            if not future.done():
                future.set_result(body)

    def batches() -> None:
        while True:
            with arrived:
                arrived.wait_for(lambda: bool(waiting))
                taken = waiting[:]
                waiting.clear()
            texts = [text for _, each in taken for text in each]
            encodings = tokenizer.encode_batch_fast(texts)
            ids = np.fromiter((i for e in encodings for i in e.ids), np.int64)
            lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
            means = table.means(ids, lengths)
            means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
            answers, at = [], 0
            for future, each in taken:
                rows, at = means[at : at + len(each)], at + len(each)
                tokens = int(lengths[at - len(each) : at].sum())
                data = [
                    {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(rows)
                ]
                usage = {"prompt_tokens": tokens, "total_tokens": tokens}
                body = {"object": "list", "data": data, "model": name, "usage": usage}
                answers.append((future, orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)))
            loops[0].call_soon_threadsafe(answered, answers)

    threading.Thread(target=batches, daemon=True).start()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] == "lifespan.startup":
                loops.append(asyncio.get_running_loop())
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if await _health(scope, send):
            return
        texts = await _texts(receive)
        answer: asyncio.Future[bytes] = loops[0].create_future()
        with arrived:
            waiting.append((answer, texts))
            arrived.notify()
        await _send_json(send, await answer)

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--app", choices=("fastapi", "bare", "floor"), required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    import uvicorn

    if args.app == "floor":
        app = floor_app(args.model, "potion-shaped")
    else:
        from model2vec import StaticModel

        model = StaticModel.from_pretrained(args.model)
        app = (fastapi_app if args.app == "fastapi" else bare_app)(model, "potion-shaped")
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        proxy_headers=False,
    )


if __name__ == "__main__":
    main()
