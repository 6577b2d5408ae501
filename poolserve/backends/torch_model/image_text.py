"""The torch side of an image-text model (CLIP, SigLIP): its two towers, one space.

`ImageTextModule(head, input_ids, attention_mask)` runs the text tower and returns
transformers' `get_text_features` ([batch, dim] float32); `images(pixel_values)` runs the image
tower and returns `get_image_features`. Both are the model's own pooled and projected outputs,
so the vectors are those transformers gives, in the space where text and images compare.

SigLIP's texts are padded to their full trained length here (models/vision.py says why), so
every route that embeds a text (embeddings, scores, rerank) gives the vector the model card's
code gives.
"""

from __future__ import annotations

from typing import Any

import torch

from poolserve.models.kinds import Head
from poolserve.models.vision import VisionLayout


class ImageTextModule(torch.nn.Module):
    # What the engine asks of every module (backends/torch_model/module.py's PoolingModule has them
    # too).
    takes_token_types = False
    packing = None
    next_token = None

    def __init__(self, backbone: torch.nn.Module, vision: VisionLayout, pad_id: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.vision = vision
        self.pad_id = pad_id
        config: Any = getattr(backbone, "config", None)
        self.vocab_size = int(getattr(config.text_config, "vocab_size", 0) or 0)

    def packs(self, head: Head) -> bool:
        return False

    def forward(
        self,
        head: Head,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        pool_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The text vectors of a padded batch of token ids ([batch, dim] float32)."""
        if head != "embed":
            raise ValueError(f"an image-text model's text tower has no {head} head")
        pad_to = self.vision.text_pad_to
        if pad_to is not None:
            input_ids, attention_mask = self._padded(input_ids, attention_mask, pad_to)
        model: Any = self.backbone
        output = model.get_text_features(input_ids=input_ids, attention_mask=attention_mask)
        return _features(output)

    def images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """The image vectors of a batch of prepared images ([batch, dim] float32)."""
        model: Any = self.backbone
        dtype = next(self.backbone.parameters()).dtype
        return _features(model.get_image_features(pixel_values=pixel_values.to(dtype)))

    def _padded(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, length: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every row padded with the tokenizer's padding token to `length`, on its side, as the
        model's tokenizer pads with `padding="max_length"`; the padding masked or attended to
        as that tokenizer's outputs have it."""
        rows = input_ids.shape[0]
        ids = torch.full(
            (rows, length), self.pad_id, dtype=input_ids.dtype, device=input_ids.device
        )
        mask = torch.zeros_like(ids)
        left = self.vision.text_padding_side == "left"
        for row, tokens in enumerate(attention_mask.sum(dim=1).tolist()):
            start = length - tokens if left else 0
            ids[row, start : start + tokens] = input_ids[row, :tokens]
            mask[row, start : start + tokens] = 1
        return ids, mask if self.vision.mask_text_padding else torch.ones_like(ids)


def _features(output: Any) -> torch.Tensor:
    """A `get_*_features` result as float32: a tensor (transformers 4) or the pooled output of
    a model output (transformers 5)."""
    features = output if isinstance(output, torch.Tensor) else output.pooler_output
    return features.float()
