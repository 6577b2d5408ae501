"""Every architecture of docs/models.md's table at the server's true defaults (dtype auto, which is
bf16 on AVX512-BF16/AMX CPUs, and `--compile auto`), checked against the float32 references:
what a new user gets from `poolserve serve MODEL`. One server from one model file; prints a
table (model, whether its forward was compiled, the worst cosine or score difference) and the
seconds to ready.

    python -m benchmarks.zoo_defaults [--models NAME ...]

The tests (tests/e2e/test_model_zoo.py) check the same models tightly in float32 and eager;
this is the slow look at the defaults, too slow for the suite (each model compiles).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.server_process import free_port
from tests.e2e.test_model_zoo import QUERY, TEXTS, cosines
from tests.model_zoo import (
    ZOO,
    ZOO_BY_NAME,
    qwen3_reranker_seq_cls_pairs,
    reference_embeddings,
    reference_scores,
)

BF16_COSINE = 0.999
BF16_SCORE = 0.02
# bge-reranker-v2-gemma's raw logit is compared as it is, on a larger scale than a probability.
BF16_LOGIT = 0.2


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def _wait_ready(process: subprocess.Popen[bytes], url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # the server gives no other readiness signal
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"not ready after {timeout} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=[model.name for model in ZOO])
    args = parser.parse_args()
    models = [ZOO_BY_NAME[name] for name in args.models]
    root = Path(tempfile.mkdtemp(prefix="zoo-defaults-"))
    dirs = {model.name: model.make(root / model.name) for model in models}
    entries = [
        {"model": str(dirs[model.name]), "served_model_name": model.name, **model.settings}
        for model in models
    ]
    (root / "models.json").write_text(json.dumps({"models": entries}))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = root / "server.log"
    started = time.monotonic()
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "poolserve", "serve", "--port", str(port)),
                *("--config", str(root / "models.json")),
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_ready(process, url, timeout=3600)
        ready = time.monotonic() - started
        text = log.read_text(errors="replace")
        print(f"{'model':38} {'kind':14} {'compiled':9} {'check':>26}  ok")
        for model in models:
            eager = f"torch.compile failed for {model.name}" in text
            if model.kind == "embedding":
                body = {"model": model.name, "input": TEXTS}
                got = np.array(
                    [d["embedding"] for d in _post(f"{url}/v1/embeddings", body)["data"]]
                )
                worst = float(
                    cosines(got, reference_embeddings(model, dirs[model.name], TEXTS)).min()
                )
                check, ok = f"min cosine {worst:.5f}", worst >= BF16_COSINE
            else:
                raw = model.name == "bge-reranker-v2-gemma"
                body = {"model": model.name, "query": QUERY, "documents": TEXTS}
                body["use_activation"] = not raw
                if model.name == "Qwen3-Reranker-0.6B-seq-cls":
                    pairs = qwen3_reranker_seq_cls_pairs(QUERY, TEXTS)
                    body.update(query=pairs[0][0], documents=[p[1] for p in pairs])
                results = _post(f"{url}/rerank", body)["results"]
                got = np.array(
                    [r["relevance_score"] for r in sorted(results, key=lambda r: r["index"])]
                )
                expected = reference_scores(model, dirs[model.name], QUERY, TEXTS)
                worst = float(np.abs(got - expected).max())
                limit = BF16_LOGIT if raw else BF16_SCORE
                check, ok = f"max |score diff| {worst:.4f}", worst <= limit
            print(
                f"{model.name:38} {model.kind:14} {'no' if eager else 'yes':9} {check:>26}  "
                f"{'yes' if ok else 'NO'}"
            )
        print(f"ready after {ready:.0f} s ({len(models)} models, log: {log})")
    finally:
        process.terminate()
        process.wait(60)


if __name__ == "__main__":
    main()
