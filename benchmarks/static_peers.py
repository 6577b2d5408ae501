"""What users build today to serve a static embedding model (issue 61): `model2vec`'s
`StaticModel.encode` called per request, behind FastAPI with a pydantic body, or behind a bare
ASGI callable, each under the same uvicorn settings as `poolserve serve` (uvloop, httptools, no
access log). Both answer OpenAI's `/v1/embeddings` shape. Run by benchmarks/static_models.py:

    .venv/bin/python -m benchmarks.static_peers --app fastapi --model DIR --port 8100
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


def bare_app(model: Any, name: str) -> Any:
    """A bare ASGI callable: the body read, `encode`, orjson's bytes."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/health":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        request = orjson.loads(body)
        texts = [request["input"]] if isinstance(request["input"], str) else request["input"]
        vectors = model.encode(texts)
        answer = orjson.dumps(_answer(name, vectors, sum(len(t.split()) for t in texts)))
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(answer)),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--app", choices=("fastapi", "bare"), required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    import uvicorn
    from model2vec import StaticModel

    model = StaticModel.from_pretrained(args.model)
    build = fastapi_app if args.app == "fastapi" else bare_app
    uvicorn.run(
        build(model, "potion-shaped"),
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
