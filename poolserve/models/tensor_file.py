"""A safetensors file's tensors memory-mapped, not read: its header (a little-endian u64 length,
then JSON naming each tensor's dtype, shape and byte range) says where each one lies, and
numpy maps those bytes. safetensors' own numpy loader copies every tensor into memory; a static
embedding model's table (potion-multilingual-128M: 500k tokens × 256 floats) is better left in
the page cache, shared by every process that serves it, and ready at once."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from poolserve.errors import ModelLoadError

# safetensors' dtype names, as numpy reads them (BF16 is widened: numpy has no bfloat16).
NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
}
# A header larger than this is not a safetensors file's (the format caps it at 100 MB).
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True)
class TensorEntry:
    """One tensor as the header describes it."""

    dtype: str
    shape: tuple[int, ...]
    # Byte range within the data that follows the header.
    begin: int
    end: int


@dataclass(frozen=True)
class TensorFile:
    path: Path
    entries: dict[str, TensorEntry]
    data_offset: int

    @classmethod
    def open(cls, path: Path) -> TensorFile:
        """The header of `path` (ModelLoadError, one line, where it is not a safetensors file)."""
        try:
            with open(path, "rb") as file:
                (length,) = struct.unpack("<Q", file.read(8))
                if not 2 <= length <= MAX_HEADER_BYTES:
                    raise ValueError(f"a header of {length} bytes")
                header = json.loads(file.read(length))
        except (OSError, ValueError, struct.error) as exc:
            raise ModelLoadError(f"{path} is not a readable safetensors file: {exc}") from exc
        entries = {
            name: TensorEntry(
                str(entry["dtype"]),
                tuple(int(n) for n in entry["shape"]),
                int(entry["data_offsets"][0]),
                int(entry["data_offsets"][1]),
            )
            for name, entry in header.items()
            if name != "__metadata__"
        }
        return cls(path, entries, 8 + length)

    def array(self, name: str) -> np.ndarray:
        """Tensor `name`, memory-mapped read-only (bf16 widened to float32, in memory)."""
        entry = self.entries[name]
        dtype = NUMPY_DTYPES.get(entry.dtype)
        if dtype is None:
            raise ModelLoadError(f"{self.path}: tensor {name} has dtype {entry.dtype}, not served")
        count = int(np.prod(entry.shape, dtype=np.int64))
        if entry.end - entry.begin != count * dtype.itemsize:
            raise ModelLoadError(
                f"{self.path}: tensor {name}'s bytes do not match its shape {entry.shape}"
            )
        if count == 0:
            return np.zeros(entry.shape, dtype)
        mapped: np.ndarray = np.memmap(
            self.path, dtype, mode="r", offset=self.data_offset + entry.begin, shape=entry.shape
        )
        if entry.dtype == "BF16":
            widened: np.ndarray = (mapped.astype(np.uint32) << 16).view(np.float32)
            return widened
        return mapped
