"""Placing a model: its device and dtype chosen from what it asks for (`auto`: CUDA when present;
on CUDA bf16 where it is supported; on a CPU with more than one fast precision, `auto` stays to
be measured once the weights load: precision.py).

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


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo); empty where it cannot be read."""
    return _cpuinfo_field("model name")


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux: /proc/cpuinfo); empty where they cannot be read."""
    return frozenset(_cpuinfo_field("flags").split())


def _cpuinfo_field(name: str) -> str:
    """The first processor's `name` in /proc/cpuinfo ("" where there is none)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="ignore")
    except OSError:
        return ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip()
    return ""


# The lower precisions a CPU runs natively, and the feature flags (any of them) that do it.
_NATIVE = {"bfloat16": ("avx512_bf16", "amx_bf16"), "float16": ("amx_fp16",)}


def cpu_precisions() -> tuple[str, ...]:
    """The precisions this CPU runs well: float32, bf16 where it has AVX512-BF16 or AMX, and
    float16 where it has AMX-FP16 (either without them is emulated, and slow: torch bf16 ran
    34 sentences/s where float32 ran 169 on an AVX2 EPYC)."""
    flags = cpu_flags()
    return ("float32", *(dtype for dtype, needs in _NATIVE.items() if flags & set(needs)))


def native_features(dtype: str) -> str:
    """The CPU features that run `dtype` natively, as a CPU's data sheet names them."""
    names = {"avx512_bf16": "AVX512-BF16", "amx_bf16": "AMX", "amx_fp16": "AMX-FP16"}
    return " or ".join(names[flag] for flag in _NATIVE.get(dtype, ()))


def choose_dtype(requested: str, device: str) -> str:
    """The dtype `requested` means on `device`; "auto" where a CPU has several fast precisions
    and the model must be measured in each (precision.py)."""
    if requested != "auto":
        if requested not in _DTYPES:
            raise ModelLoadError(f"unknown dtype {requested!r}; use auto, {', '.join(_DTYPES)}")
        return requested
    if device == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "auto" if len(cpu_precisions()) > 1 else "float32"


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a dtype's name (`"bfloat16"`)."""
    return _DTYPES[name]


def place(spec: ModelSpec) -> ModelSpec:
    """`spec` with its device and dtype chosen (as asked, or for `auto` what this machine runs
    best, "auto" where that is measured at load); a device that cannot be had is a
    SettingError."""
    device = choose_device(spec.device)
    return replace(spec, device=device, dtype=choose_dtype(spec.dtype, device))
