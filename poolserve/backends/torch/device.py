"""Placing a model: its device and dtype chosen from what it asks for (`auto`: CUDA when present,
bf16 where the hardware is fast).

Both are chosen as plain names (`"cpu"`, `"bfloat16"`): the engine and the backend seam carry
names, and the torch code makes torch types of them (`torch_dtype`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.spec import ModelSpec

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def choose_device(requested: str) -> str:
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise SettingError("--device cuda was asked for, but torch sees no CUDA device")
    if requested not in ("cpu", "cuda"):
        raise ModelLoadError(f"unknown device {requested!r}; use auto, cpu or cuda")
    return requested


def cpu_has_fast_bf16() -> bool:
    """True where the CPU has AMX or AVX512-BF16 (Linux: read from /proc/cpuinfo)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="ignore")
    except OSError:
        return False
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            return bool(flags & {"amx_bf16", "avx512_bf16"})
    return False


def choose_dtype(requested: str, device: str) -> str:
    if requested != "auto":
        if requested not in _DTYPES:
            raise ModelLoadError(f"unknown dtype {requested!r}; use auto, {', '.join(_DTYPES)}")
        return requested
    if device == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "bfloat16" if cpu_has_fast_bf16() else "float32"


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a dtype's name (`"bfloat16"`)."""
    return _DTYPES[name]


def place(spec: ModelSpec) -> ModelSpec:
    """`spec` with its device and dtype chosen (as asked, or for `auto` what this machine runs
    best); a device that cannot be had is a SettingError."""
    device = choose_device(spec.device)
    return replace(spec, device=device, dtype=choose_dtype(spec.dtype, device))
