"""Tiny image-text checkpoints in the on-disk layouts of CLIP and SigLIP, real images to embed,
and the references a correct server must match (transformers' `get_text_features` and
`get_image_features`, or sentence-transformers for its own layout), never poolserve code.

- `make_clip_vit_base_patch32`: openai/clip-vit-base-patch32's files: `CLIPModel` config.json,
  model.safetensors, the old-style preprocessor_config.json (CLIPFeatureExtractor, resize the
  short side to 224 bicubic, center crop, CLIP's mean and std), CLIP's byte-level BPE with
  `</w>` word ends (trained here, wrapped in transformers' CLIPTokenizer) and its specials
  `<|startoftext|>` `<|endoftext|>` last in the vocabulary, 77 positions. 2 layers, 32 wide, a
  16-wide projection; the vision tower in ViT-B/32's sequence shape (224 px, 32 px patches).
- `make_clip_vit_b_32_sentence_transformers`: sentence-transformers/clip-ViT-B-32's layout:
  modules.json naming `sentence_transformers.models.CLIPModel` at `0_CLIPModel/`, which holds the
  transformers checkpoint; no config.json at the top.
- `make_siglip2_base_patch16_224`: google/siglip2-base-patch16-224's files: a `SiglipModel`
  (model_type "siglip") with Gemma's tokenizer, 64 text positions, a SiglipImageProcessor
  config (resize to 224 × 224 bilinear, mean and std 0.5), 16 px patches.

The images are photos and drawings that ship with installed packages (scikit-learn's two sample
photos, networkx's rendered graphs), in their own formats and sizes, plus crops of them in other
shapes and formats.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tests.model_zoo.tokenizer_files import save_tokenizer as _save_tokenizer
from tests.model_zoo.tokenizer_files import write_gemma_tokenizer as _write_gemma_tokenizer
from tests.model_zoo.training import corpus as _corpus
from tests.tiny_models import INITIALIZER_RANGE, SEED, _write_json

HIDDEN = 32
INTERMEDIATE = 64
LAYERS = 2
HEADS = 2
PROJECTION = 16
CLIP_VOCAB = 4000
CLIP_POSITIONS = 77
SIGLIP_POSITIONS = 64

CLIP_PREPROCESSOR = {
    "crop_size": 224,
    "do_center_crop": True,
    "do_normalize": True,
    "do_resize": True,
    "feature_extractor_type": "CLIPFeatureExtractor",
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "resample": 3,
    "size": 224,
}
SIGLIP_PREPROCESSOR = {
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "SiglipImageProcessor",
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "SiglipProcessor",
    "resample": 2,
    "rescale_factor": 0.00392156862745098,
    "size": {"height": 224, "width": 224},
}
CLIP_SPECIALS = ("<|startoftext|>", "<|endoftext|>")

# Captions of the kind image search gets (the tokenizer's corpus is the project's text).
CAPTIONS = (
    "a photo of a Chinese temple by the sea",
    "a close-up of a yellow flower",
    "a diagram of a small graph with coloured nodes",
    "Street view: a red car parked outside a café at night.",
)


# --- tokenizers ---------------------------------------------------------------------------------


@functools.cache
def _clip_bpe() -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    """CLIP's byte-level BPE: NFC, whitespace runs to one space, lower case, CLIP's split regex,
    words ending in `</w>`; the two specials last, as in CLIP's vocabulary."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(end_of_word_suffix="</w>"))
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                Regex(r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""),
                behavior="removed",
                invert=True,
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=CLIP_VOCAB - len(CLIP_SPECIALS),
        initial_alphabet=alphabet,
        end_of_word_suffix="</w>",
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer)
    import json

    model = json.loads(tokenizer.to_str())["model"]
    vocab = dict(model["vocab"])
    for special in CLIP_SPECIALS:
        vocab[special] = len(vocab)
    pairs = [m if isinstance(m, list) else m.split(" ", 1) for m in model["merges"]]
    return vocab, tuple((str(a), str(b)) for a, b in pairs)


def _write_clip_tokenizer(directory: Path) -> int:
    from transformers import CLIPTokenizer

    vocab, merges = _clip_bpe()
    tokenizer = CLIPTokenizer(vocab=dict(vocab), merges=list(merges))
    specials = {
        "bos_token": "<|startoftext|>",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
    }
    config = {
        **specials,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": True,
        "do_lower_case": True,
        "errors": "replace",
        "model_max_length": CLIP_POSITIONS,
        "tokenizer_class": "CLIPTokenizer",
    }
    _save_tokenizer(tokenizer, directory, config, specials)
    return len(vocab)


# --- checkpoints --------------------------------------------------------------------------------


def _tower(**extra: Any) -> dict[str, Any]:
    return {
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "initializer_range": INITIALIZER_RANGE,
        **extra,
    }


def _save_model(model: Any, directory: Path) -> None:
    model.save_pretrained(str(directory), safe_serialization=True)
    (directory / "generation_config.json").unlink(missing_ok=True)


def make_clip_vit_base_patch32(directory: Path) -> Path:
    from transformers import CLIPConfig, CLIPModel

    directory.mkdir(parents=True, exist_ok=True)
    vocab = _write_clip_tokenizer(directory)
    config = CLIPConfig(
        text_config=_tower(
            vocab_size=vocab,
            max_position_embeddings=CLIP_POSITIONS,
            bos_token_id=vocab - 2,
            eos_token_id=vocab - 1,
            pad_token_id=1,
        ),
        vision_config=_tower(image_size=224, patch_size=32),
        projection_dim=PROJECTION,
        initializer_factor=1.0,
    )
    torch.manual_seed(SEED)
    model = CLIPModel(config).eval()
    _save_model(model, directory)
    _write_json(directory / "preprocessor_config.json", CLIP_PREPROCESSOR)
    return directory


def make_clip_vit_b_32_sentence_transformers(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    make_clip_vit_base_patch32(directory / "0_CLIPModel")
    _write_json(
        directory / "modules.json",
        [
            {
                "idx": 0,
                "name": "0",
                "path": "0_CLIPModel",
                "type": "sentence_transformers.models.CLIPModel",
            }
        ],
    )
    _write_json(
        directory / "config_sentence_transformers.json",
        {
            "__version__": {
                "sentence_transformers": "2.0.0",
                "transformers": "4.7.0",
                "pytorch": "1.9.0",
            }
        },
    )
    return directory


def make_siglip2_base_patch16_224(directory: Path) -> Path:
    from transformers import SiglipConfig, SiglipModel

    directory.mkdir(parents=True, exist_ok=True)
    vocab = _write_gemma_tokenizer(directory, add_eos_token=True, model_max_length=SIGLIP_POSITIONS)
    config = SiglipConfig(
        text_config=_tower(
            vocab_size=vocab,
            max_position_embeddings=SIGLIP_POSITIONS,
            pad_token_id=0,
            eos_token_id=1,
            bos_token_id=2,
            projection_size=HIDDEN,
        ),
        vision_config=_tower(image_size=224, patch_size=16),
    )
    torch.manual_seed(SEED)
    model = SiglipModel(config).eval()
    _save_model(model, directory)
    _write_json(directory / "preprocessor_config.json", SIGLIP_PREPROCESSOR)
    return directory


# --- images -------------------------------------------------------------------------------------


def photo_paths() -> list[Path]:
    """scikit-learn's sample photos (JPEG, 640 × 427) and networkx's rendered graphs (PNG)."""
    photos = files("sklearn.datasets") / "images"
    drawings = files("networkx.drawing.tests") / "baseline"
    paths = [Path(str(photos / "china.jpg")), Path(str(photos / "flower.jpg"))]
    paths += sorted(Path(str(drawings)).glob("*.png"))[:2]
    return paths


def sample_images() -> list[Any]:
    """The photos and drawings, and crops of them in other shapes (tall, wide, small)."""
    from PIL import Image

    images = [Image.open(path) for path in photo_paths()]
    china, flower = images[0], images[1]
    images += [
        china.crop((100, 0, 300, 427)),  # tall
        flower.crop((0, 150, 640, 260)),  # wide
        flower.resize((48, 40)),  # smaller than the model's input
    ]
    return images


def encoded(image: Any, format: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=format)
    return buffer.getvalue()


def data_uri(image: Any, format: str = "PNG") -> str:
    import base64

    mime = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}[format]
    return f"data:{mime};base64,{base64.b64encode(encoded(image, format)).decode()}"


# --- references ---------------------------------------------------------------------------------


def _load(directory: Path) -> Any:
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(directory), dtype=torch.float32).eval()


def _as_array(output: Any) -> np.ndarray:
    tensor = output if isinstance(output, torch.Tensor) else output.pooler_output
    return tensor.detach().numpy().astype(np.float32)


def text_features(directory: Path, texts: Sequence[str]) -> np.ndarray:
    """transformers' `get_text_features`, the texts tokenized as the model card says (SigLIP:
    padded to the full length)."""
    from transformers import AutoTokenizer

    model = _load(directory)
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    siglip = model.config.model_type == "siglip"
    inputs = tokenizer(
        list(texts),
        padding="max_length" if siglip else True,
        max_length=SIGLIP_POSITIONS if siglip else None,
        return_tensors="pt",
    )
    with torch.inference_mode():
        return _as_array(model.get_text_features(**inputs))


def image_features(directory: Path, images: Sequence[Any]) -> np.ndarray:
    """transformers' `get_image_features`, the images prepared by the checkpoint's processor."""
    from transformers import AutoImageProcessor

    model = _load(directory)
    processor = AutoImageProcessor.from_pretrained(str(directory), backend="pil")
    rgb = [image.convert("RGB") for image in images]
    pixels = processor(images=rgb, return_tensors="pt")["pixel_values"]
    with torch.inference_mode():
        return _as_array(model.get_image_features(pixel_values=pixels))
