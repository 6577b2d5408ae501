"""An exported graph in int8 by OpenVINO's post-training quantizer (NNCF): weights per output
channel, activations per tensor with ranges calibrated on the probe's calibration sentences,
after NNCF's SmoothQuant at the first α the quality gate accepts. Unlike ONNX Runtime's dynamic
int8, the activation ranges are fixed at quantization, so a text's vector does not depend on
its batch.

The α are tried from 0.8 down. The gate's worst cosine is not monotonic in α: measured on
all-MiniLM-L6-v2's held-out probe sentences, NNCF's default for transformers (0.95) gives
0.969, 0.8 gives 0.980, 0.7 gives 0.991 and 0.6 gives 0.978 (means 0.997-0.998).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from poolserve.backends.graph.int8_cache import Quantizer
from poolserve.backends.graph.onnx_export import Feeds, quiet_loggers

MODEL_XML = "model.xml"


def _versions() -> dict[str, str]:
    import nncf
    import openvino

    return {"openvino": openvino.__version__, "nncf": nncf.__version__}


def _prepare(graph: Path, feeds: Sequence[Feeds]) -> tuple[Any, Any, int]:
    import nncf
    import openvino

    return openvino.Core().read_model(graph), nncf.Dataset(list(feeds)), len(feeds)


def _quantize(prepared: tuple[Any, Any, int], alpha: float, directory: Path) -> Path:
    import nncf
    import openvino
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        AdvancedSmoothQuantParameters,
    )

    model, dataset, size = prepared
    # NNCF logs each step and draws progress bars on stdout: the caller's progress line says it.
    with contextlib.redirect_stdout(io.StringIO()), quiet_loggers(("nncf",)):
        quantized = nncf.quantize(
            model,
            dataset,
            model_type=nncf.ModelType.TRANSFORMER,
            subset_size=size,
            advanced_parameters=AdvancedQuantizationParameters(
                smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=alpha)
            ),
        )
    path = directory / MODEL_XML
    openvino.save_model(quantized, path, compress_to_fp16=False)
    return path


OPENVINO_INT8 = Quantizer(
    name="openvino",
    alphas=(0.8, 0.7, 0.6),
    prepare=_prepare,
    quantize=_quantize,
    versions=_versions,
    code=(Path(__file__).resolve(),),
    model_file=MODEL_XML,
)
