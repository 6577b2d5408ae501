"""Compact embedding types: float32 vectors as int8/uint8 values or packed bits.

- int8: each vector scaled on its own, `round(127 × v / max|v|)`, so its largest component is
  ±127 and cosine similarity is kept to about 1 % (no calibration set, and a vector's values do
  not depend on what else is in the request or the batch);
- uint8: the int8 values shifted by 128 (1 to 255);
- ubinary: one bit per dimension (1 where the value is above 0), packed 8 to a byte, first
  dimension in the high bit: the same bits as sentence-transformers' `quantize_embeddings`;
- binary: the ubinary bytes minus 128, as int8 (sentence-transformers' "binary").
A dimension count that is not a multiple of 8 is padded with 0 bits.

`as_dtype` adds the narrower float types (float16, bfloat16, rounded to nearest even) for the
OpenAI route's `embed_dtype`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

CompactType = Literal["int8", "uint8", "binary", "ubinary"]
COMPACT_TYPES: tuple[CompactType, ...] = ("int8", "uint8", "binary", "ubinary")
EmbedDType = Literal["float32", "float16", "bfloat16", "int8", "uint8", "binary", "ubinary"]


def embedding_type(kind: str) -> str:
    """The type a vector's space counts (models/embedding_space.py): a compact type, or float
    for every float encoding (float32, float16, bfloat16, base64 of any)."""
    return kind if kind in COMPACT_TYPES else "float"


def quantize(vectors: np.ndarray, kind: CompactType) -> np.ndarray:
    """`vectors` (n, dim) float as `kind`: int8 or uint8 (n, dim), packed bits (n, ⌈dim/8⌉)."""
    if kind in ("binary", "ubinary"):
        packed: np.ndarray = np.packbits(vectors > 0, axis=-1)
        if kind == "ubinary":
            return packed
        signed: np.ndarray = (packed.astype(np.int16) - 128).astype(np.int8)
        return signed
    scale = np.abs(vectors).max(axis=-1, keepdims=True)
    scaled = np.rint(127.0 * vectors.astype(np.float64) / np.maximum(scale, 1e-12))
    as_int8: np.ndarray = np.clip(scaled, -127, 127).astype(np.int8)
    if kind == "int8":
        return as_int8
    as_uint8: np.ndarray = (as_int8.astype(np.int16) + 128).astype(np.uint8)
    return as_uint8


def bfloat16_bits(vectors: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16, rounded to nearest even: their 16 bits, as uint16."""
    bits = np.ascontiguousarray(vectors, np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    upper: np.ndarray = (rounded >> 16).astype(np.uint16)
    return upper


def as_dtype(vectors: np.ndarray, dtype: EmbedDType) -> np.ndarray:
    """`vectors` (float32) in `dtype`; bfloat16 as its bits (uint16), see `bfloat16_bits`."""
    if dtype == "float32":
        return np.ascontiguousarray(vectors, np.float32)
    if dtype == "float16":
        return vectors.astype(np.float16)
    if dtype == "bfloat16":
        return bfloat16_bits(vectors)
    return quantize(vectors, dtype)


def as_floats(values: np.ndarray, dtype: EmbedDType) -> np.ndarray:
    """What `as_dtype` gave, as float32 numbers a JSON list can hold (integers as they are)."""
    if dtype == "bfloat16":
        widened: np.ndarray = (values.astype(np.uint32) << 16).view(np.float32)
        return widened
    return values
