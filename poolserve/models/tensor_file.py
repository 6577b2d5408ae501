"""A safetensors file's tensors memory-mapped, not read: its header (a little-endian u64 length,
then JSON naming each tensor's dtype, shape and byte range) says where each one lies, and
numpy maps those bytes. safetensors' own numpy loader copies every tensor into memory; a static
embedding model's table (potion-multilingual-128M: 500k tokens × 256 floats) is better left in
the page cache, shared by every process that serves it, and ready at once.

A mapped file must not change under the server: a checkpoint is replaced by writing a new file
and renaming it over the old one (as `huggingface_hub` and safetensors' `save_file` do), never
by writing into it (`cp` over it, `rsync --inplace`): changed bytes would be served as they
are, and a file cut shorter ends the process (SIGBUS) at the next lookup past its end."""

from __future__ import annotations

import json
import os
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
                size = os.fstat(file.fileno()).st_size
                (length,) = struct.unpack("<Q", file.read(8))
                if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
                    raise ValueError(f"a header of {length} bytes")
                header = json.loads(file.read(length))
                entries = {
                    name: _entry(name, fields, size - 8 - length)
                    for name, fields in header.items()
                    if name != "__metadata__"
                }
        except (OSError, ValueError, TypeError, KeyError, IndexError, struct.error) as exc:
            raise ModelLoadError(
                f"{path} is not a whole safetensors file ({type(exc).__name__}: {exc}); "
                "download or write it again"
            ) from exc
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


def _entry(name: str, fields: Any, data_bytes: int) -> TensorEntry:
    """One tensor's header, its bytes within the data the file holds (ValueError where not)."""
    begin, end = (int(n) for n in fields["data_offsets"])
    if not 0 <= begin <= end <= data_bytes:
        raise ValueError(f"tensor {name} lies at bytes {begin}-{end} of {data_bytes}")
    return TensorEntry(str(fields["dtype"]), tuple(int(n) for n in fields["shape"]), begin, end)
