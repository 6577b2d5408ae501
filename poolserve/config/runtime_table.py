"""The runtimes that can run a model (`--backend`), each declared once with what it can run: its
precisions, int8, devices, image inputs, and the pip extra that brings its libraries. Names and
abilities only: nothing here imports a runtime, so the flags and the chooser (backends/choice/)
read them without loading any runtime's libraries. A new runtime is a package under backends/ and
one entry here."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeEntry:
    """One runtime: `--backend name`, the module whose `make_backend` builds it, and what it can
    run."""

    name: str
    module: str
    # The top-level package whose presence means the runtime is installed (its version is part
    # of a measured choice's cache key).
    package: str
    # The pip extra that installs it (None: a dependency of poolserve itself).
    extra: str | None
    # The float precisions it runs on a CPU that runs them well (backends/torch_model/device.py).
    precisions: tuple[str, ...]
    int8: bool = False
    cuda: bool = False
    images: bool = False

    def installed(self) -> bool:
        return importlib.util.find_spec(self.package) is not None


RUNTIMES = (
    RuntimeEntry(
        "torch",
        "poolserve.backends.torch.torch_backend",
        "torch",
        None,
        ("float32", "bfloat16", "float16"),
        cuda=True,
        images=True,
    ),
    RuntimeEntry(
        "onnxruntime",
        "poolserve.backends.onnxruntime.ort_backend",
        "onnxruntime",
        "onnx",
        ("float32",),
        int8=True,
    ),
    RuntimeEntry(
        "openvino",
        "poolserve.backends.openvino.ov_backend",
        "openvino",
        "openvino",
        ("float32", "bfloat16"),
        int8=True,
    ),
)
RUNTIME_BY_NAME = {entry.name: entry for entry in RUNTIMES}
# `--backend auto`: the runtime measured fastest on the machine (backends/choice/).
AUTO_MODULE = "poolserve.backends.choice.auto_backend"
