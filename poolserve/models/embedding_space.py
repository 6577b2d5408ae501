"""The fingerprint of an embedding space: which space a model's vectors live in, so that a client
can refuse to mix vectors of two spaces in one index (a model swapped under the same name, another
pooling, Dense head, Matryoshka dimension or quantization).

A fingerprint (`es1-` and 16 hex digits) hashes what decides the space:

- the weights' content: every weight file under the model's directory that is loaded
  (`*.safetensors`, else `*.bin`/`*.pth`, and `*.pt`: the transformer, the Dense modules,
  BGE-M3's heads, an image tower) and the tokenizer (it decides which token ids a text becomes).
  The digest of the files is computed once and cached beside the compile cache, keyed by each
  file's path, size and modification time;
- the pooling (its modes, whether a prompt's tokens are pooled), the Dense layers' shapes and
  activations, and which output it is (`embed`, `token_embed`, `sparse`, `image_embed`: an
  image-text model's text and image vectors share one space, so both say `embed`);
- a request's normalization, output dimension and embedding type (float, or a compact type:
  int8, uint8, binary, ubinary).

Not the precision it ran in (float32, bfloat16, an int8 model: the same space, a little noise
apart), not the prompt (a query prompt and a document prompt put texts in one space by design),
nor how the work was batched or on which runner. A copy of the weights in another file format
(`.bin` saved as `.safetensors`) gets another fingerprint: a false alarm, never a silent mix.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from poolserve._environment import cache_dir
from poolserve.models.layout import ModelLayout

logger = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
# Copies of a checkpoint's weights that transformers and sentence-transformers skip where
# safetensors lie beside them (BGE-M3's heads, `*.pt`, are read whatever lies beside them).
PICKLED = (".bin", ".pth")
# Other formats of the same weights (exports beside the checkpoint), not read by poolserve.
EXPORT_FOLDERS = ("onnx", "openvino")
# The outputs whose vectors share one space.
SAME_SPACE = {"image_embed": "embed"}
PREFIX = "es1-"


def model_folders(layout: ModelLayout) -> list[Path]:
    """The folders that hold a model's weights: its transformers checkpoint's, and its Dense
    modules' where they lie elsewhere (a sentence-transformers model whose transformer is in
    a subfolder)."""
    folders = [layout.directory]
    for dense in layout.dense:
        if not dense.directory.is_relative_to(layout.directory):
            folders.append(dense.directory)
    return folders


def weight_files(directory: Path) -> list[Path]:
    """The weight files under a folder, in a fixed order."""
    found = []
    for path in directory.rglob("*"):
        relative = path.relative_to(directory)
        hidden = any(part.startswith(".") for part in relative.parts)
        if hidden or relative.parts[0] in EXPORT_FOLDERS or not path.is_file():
            continue
        if path.suffix in WEIGHT_SUFFIXES:
            found.append(path)
    # Where a folder holds safetensors, its pickled copies are not what is loaded (a replica
    # whose cache also got a pytorch_model.bin keeps the same fingerprint).
    safe = {path.parent for path in found if path.suffix == ".safetensors"}
    loaded = [path for path in found if path.parent not in safe or path.suffix not in PICKLED]
    return sorted(loaded, key=lambda path: path.relative_to(directory).as_posix())


def _file_key(files: Iterable[Path]) -> str:
    """What a cached digest is valid for: each file's path, size and modification time."""
    parts = []
    for path in files:
        stat = path.stat()
        parts.append(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def weights_digest(folders: Sequence[Path], cache: Path | None = None) -> str:
    """The digest of the content of the weight files under `folders` (cached; see the
    module)."""
    named = [
        (f"{index}/{path.relative_to(folder).as_posix()}", path)
        for index, folder in enumerate(folders)
        for path in weight_files(folder)
    ]
    folder = (cache or cache_dir()) / "embedding-space"
    entry = folder / f"{_file_key(path for _, path in named)}.json"
    try:
        cached: str = json.loads(entry.read_text())["digest"]
        return cached
    except (OSError, ValueError, KeyError):
        pass
    digest = hashlib.sha256()
    for name, path in named:
        digest.update(name.encode() + b"\0")
        with open(path, "rb") as file:
            digest.update(hashlib.file_digest(file, "sha256").digest())
    result = digest.hexdigest()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        temporary = entry.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"digest": result, "files": len(named)}))
        os.replace(temporary, entry)
    except OSError as exc:  # a read-only cache: hashed again at the next start
        logger.warning("could not cache the weights' digest in %s: %s", folder, exc)
    return result


@dataclass(frozen=True)
class EmbeddingSpace:
    """What a model contributes to its fingerprints: its weights' and tokenizer's digest and how
    it pools; `fingerprint` adds what a request asks for."""

    model: str

    @classmethod
    def of(cls, layout: ModelLayout, tokenizer_json: str, weights: str) -> EmbeddingSpace:
        described = {
            "weights": weights,
            "tokenizer": hashlib.sha256(tokenizer_json.encode()).hexdigest(),
            "pooling": list(layout.pooling_modes),
            "include_prompt": layout.include_prompt,
            "dense": [
                [dense.in_features, dense.out_features, dense.bias, dense.activation]
                for dense in layout.dense
            ],
            "splade": [layout.splade_strategy, layout.splade_activation],
        }
        if layout.static is not None:
            # Whose rules turn texts into its rows (model2vec's cut and unknown token).
            described["static"] = [layout.static.library, layout.static.max_length]
        return cls(_digest(described))

    def fingerprint(
        self, *, head: str, normalize: bool, dimensions: int, embedding_type: str = "float"
    ) -> str:
        """The space of one output (`head`) as a request asks for it."""
        head = SAME_SPACE.get(head, head)
        return _fingerprint(self.model, head, normalize, dimensions, embedding_type)


class SpaceOfLoaded:
    """A model's `EmbeddingSpace`, known once its weights are on disk (a hub model's are fetched
    when it starts)."""

    def __init__(self) -> None:
        self._space: EmbeddingSpace | None = None

    def measure(self, layout: ModelLayout, tokenizer_json: str) -> None:
        weights = weights_digest(model_folders(layout))
        self._space = EmbeddingSpace.of(layout, tokenizer_json, weights)

    @property
    def space(self) -> EmbeddingSpace:
        if self._space is None:
            raise RuntimeError("the model's embedding space is known once it has started")
        return self._space


# Every request that answers vectors asks for one: a JSON dump and a hash each time cost the
# event loop about 1 % of its samples at c=64.
@functools.lru_cache(maxsize=1024)
def _fingerprint(
    model: str, head: str, normalize: bool, dimensions: int, embedding_type: str
) -> str:
    return PREFIX + _digest([model, head, normalize, dimensions, embedding_type])[:16]


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()
