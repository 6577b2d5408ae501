"""Batch-invariant forward passes (`--batch-invariant`): a text's outputs are the same bits
whatever batch it runs in (alone, beside any others, on any runner), so a cached vector equals a
recomputed one and a test on embeddings never flakes.

Three things make the last bits of a text's vector depend on its neighbours in a batch, and each
is replaced here by a computation whose reduction order the batch cannot change:

- **matrix products** pick their kernel by the number of rows (a matrix-vector product for one
  row, other blockings, or a split of the reduction across threads, for more): every linear layer
  runs in blocks of `BLOCK_ROWS` rows, the last one padded with zeros, so every block is the same
  product of the same shape, and a row's result is the same wherever it sits in a block;
- **attention** over a padded batch reduces over the padded length: each sequence attends on
  its own, over its own tokens only, with an explicit mask (a sequence alone, which its model
  runs without a mask, and the same sequence in a padded batch give one computation);
- **pooling** reduces over the padded length: each sequence is pooled over its own tokens.

The kernels are invariant_kernels.py's. The rest works row by row (embeddings, layer norms,
activations, the normalization in post-processing). So the runners run padded batches, eagerly
(a compiled graph and a packed row reduce in their own orders), each on the same number of
threads (no cores lent, no single-thread small batches: a product split across threads sums in
another order).
"""

from __future__ import annotations

from poolserve.backends.torch_model.image_text import ImageTextModule
from poolserve.backends.torch_model.loader import load_module
from poolserve.backends.torch_model.module import PoolingModule
from poolserve.errors import SettingError
from poolserve.models.spec import ModelSpec


def invariant_module(spec: ModelSpec) -> PoolingModule | ImageTextModule:
    """`load_module`, its forward made batch-invariant; a model whose attention is not torch's
    scaled-dot-product attention (which this replaces per sequence) is refused."""
    module = load_module(spec)
    if not isinstance(module, PoolingModule):
        raise SettingError("--batch-invariant serves text models; leave it out for images")
    attention = getattr(getattr(module.backbone, "config", None), "_attn_implementation", None)
    if attention != "sdpa":
        raise SettingError(
            f"--batch-invariant needs scaled-dot-product attention, and {spec.name} runs "
            f"{attention} attention: leave --batch-invariant out for this model"
        )
    module.batch_invariant = True
    return module
