"""What text-embeddings-inference's `GET /info` (and gRPC's Info) says: what the served model is
and how the server is set up, in TEI's words."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from poolserve._version import __version__
from poolserve.engine.model_backend import PrecisionReport, QuantizationReport, RuntimeChoice
from poolserve.service.model_service import ModelService
from poolserve.serving.serving_state import ServingState


def info_fields(state: ServingState, service: ModelService) -> dict[str, Any]:
    """What `/info` (and gRPC's Info) says about `service` on this server."""
    classifier = service.tasks.classify.classifier if service.tasks.classify is not None else None
    if classifier is not None or service.kind == "cross_encoder":
        # A cross-encoder is a reranker, one whose score is an LLM's answer (a Qwen3-Reranker
        # served as a cross-encoder has no classifier head) included: its one score.
        labels = classifier.labels if classifier is not None else ("score",)
        model_type: dict[str, Any] = {
            "reranker" if service.kind == "cross_encoder" else "classifier": {
                "id2label": {str(i): label for i, label in enumerate(labels)},
                "label2id": {label: i for i, label in enumerate(labels)},
            }
        }
    else:
        pooling = "+".join(service.core.model.layout.pooling_modes)
        model_type = {"embedding": {"pooling": pooling}}
    return {
        "model_id": service.served_name,
        "model_sha": None,
        "model_dtype": service.core.model.dtype,
        "model_type": model_type,
        "max_concurrent_requests": state.admission.max_requests,
        "max_input_length": service.max_model_len,
        "max_batch_tokens": service.core.config.max_batch_tokens,
        "max_batch_requests": service.core.config.max_batch_size,
        "max_client_batch_size": state.max_client_batch_size,
        # Whether an input too long for the model is cut where its request does not say.
        "auto_truncate": service.long_input == "truncate",
        "tokenization_workers": state.cpu.workers,
        "version": __version__,
        **service.tasks.prompts.card(),
        "precision": _precision(service.core.precision),
        "quantization": _quantization(service.core.quantization),
        "engine": _engine(service.core.choice),
    }


def _engine(choice: RuntimeChoice | None) -> dict[str, Any] | None:
    """How `--backend auto` chose the engine, with every trial (poolserve's own field; null
    where the engine was named)."""
    if choice is None:
        return None
    return {
        "chosen": {"engine": choice.runtime, "precision": choice.precision},
        "source": choice.source,
        "seconds": choice.seconds,
        "trials": [asdict(trial) for trial in choice.trials],
    }


def _quantization(report: QuantizationReport | None) -> dict[str, Any] | None:
    """The quality gate of a quantized model (poolserve's own field; null where none)."""
    if report is None:
        return None
    return {
        "scheme": report.scheme,
        "served": report.served,
        "gate": dict(report.figures),
        "failures": list(report.failures),
    }


def _precision(report: PrecisionReport | None) -> dict[str, Any] | None:
    """How `--dtype auto` chose `model_dtype` (poolserve's own field; null where asked for)."""
    if report is None:
        return None
    return {
        "chosen": report.dtype,
        "source": report.source,
        "probe_seconds": dict(report.seconds),
        "error_from_float32": dict(report.errors),
    }
