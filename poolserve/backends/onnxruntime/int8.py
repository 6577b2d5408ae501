"""An exported graph in int8: weights quantized per output channel, activations per tensor as
they run (ONNX Runtime's dynamic quantization, which runs on VNNI's int8 dot products), after
SmoothQuant-style scaling.

Per-tensor activation quantization breaks where a few channels of a layer's input carry values
far larger than the rest (measured on all-MiniLM-L6-v2 and real prose: a worst cosine of 0.975
against float32 without scaling). SmoothQuant (Xiao et al., 2023) moves that range into the
weights: each input channel j of a MatMul is divided by s_j = max|x_j|^α / max|W_j|^(1-α) and
its weight row multiplied by it, which leaves the product unchanged in exact arithmetic. Here
the division is a Mul node inserted before each MatMul (no assumption about what precedes it),
the ranges max|x_j| come from running the float32 graph over the probe (`activation_ranges`),
and α is chosen by the caller by the quality gate (all-MiniLM-L6-v2: α 0.5 gives a worst cosine
of 0.965, 0.7 gives 0.985).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

from poolserve.backends.graph.onnx_export import EXTERNAL_DATA_BYTES, Feeds

# A scale is kept within these bounds: channels that never fire must not blow up their weights.
_SCALE_BOUNDS = (1e-2, 1e2)


def _weighted_matmuls(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, onnx.TensorProto]]:
    """The MatMuls whose second input is a 2-D weight: the linear layers."""
    weights = {tensor.name: tensor for tensor in model.graph.initializer}
    return [
        (node, weights[node.input[1]])
        for node in model.graph.node
        if node.op_type == "MatMul"
        and node.input[1] in weights
        and len(weights[node.input[1]].dims) == 2
    ]


def activation_ranges(model_path: Path, feeds: Sequence[Feeds]) -> dict[str, np.ndarray]:
    """The largest magnitude of each linear layer's input, per channel, over `feeds`."""
    model = onnx.load(str(model_path))
    names = sorted({node.input[0] for node, _ in _weighted_matmuls(model)})
    outputs = {output.name for output in model.graph.output}
    model.graph.output.extend(
        onnx.ValueInfoProto(name=name) for name in names if name not in outputs
    )
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    ranges: dict[str, np.ndarray] = {}
    for feed in feeds:
        for name, value in zip(names, session.run(names, dict(feed)), strict=True):
            largest = np.abs(value).reshape(-1, value.shape[-1]).max(axis=0)
            ranges[name] = np.maximum(ranges[name], largest) if name in ranges else largest
    return ranges


def smoothed(model_path: Path, ranges: Mapping[str, np.ndarray], alpha: float) -> onnx.ModelProto:
    """The graph with each linear layer's input scaled down per channel and its weights up."""
    model = onnx.load(str(model_path))
    inserted: list[tuple[onnx.NodeProto, onnx.NodeProto]] = []
    for node, weight in _weighted_matmuls(model):
        values = numpy_helper.to_array(weight).astype(np.float32)
        activations = np.maximum(ranges[node.input[0]], 1e-5)
        rows = np.maximum(np.abs(values).max(axis=1), 1e-5)
        scale = np.clip(activations**alpha / rows ** (1 - alpha), *_SCALE_BOUNDS).astype(np.float32)
        weight.CopyFrom(numpy_helper.from_array(values * scale[:, None], weight.name))
        inverse = numpy_helper.from_array(1.0 / scale, f"{node.name}.smooth_scale")
        model.graph.initializer.append(inverse)
        scaled = f"{node.input[0]}.smoothed_for.{node.name}"
        mul = helper.make_node(
            "Mul", [node.input[0], inverse.name], [scaled], name=f"{node.name}.smooth"
        )
        node.input[0] = scaled
        inserted.append((node, mul))
    nodes = list(model.graph.node)
    for node, mul in inserted:
        nodes.insert(nodes.index(node), mul)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def quantize(model: onnx.ModelProto, directory: Path, name: str) -> Path:
    """`model` with its linear layers in int8 (weights per output channel), written as
    `directory/name`."""
    source = directory / f"{name}.float32.onnx"
    large = model.ByteSize() > EXTERNAL_DATA_BYTES
    onnx.save(model, str(source), save_as_external_data=large)
    destination = directory / name
    with _quiet_quantizer():
        quantize_dynamic(
            source,
            destination,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            weight_type=QuantType.QInt8,
            use_external_data_format=large,
        )
    for path in directory.glob(f"{name}.float32.onnx*"):
        path.unlink()
    return destination


@contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """ONNX Runtime's quantizer logs to the root logger, for its own users: advice to run its
    pre-processing (shape inference for other operators than the MatMuls quantized here), and a
    line for each tensor it quantizes."""
    root = logging.getLogger()

    def advice(record: logging.LogRecord) -> bool:
        return record.name != "root"

    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)
