"""Packed sequence classifiers (cross-encoders, text classifiers): for each head structure of
transformers' classes, a packed batch gives every sequence the logits the model itself gives it
in a padded batch; heads that cannot be applied per sequence, and a head read at the wrong
position, are refused at the check, not served."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from poolserve.backends.torch_model.loader import pack_if_checked
from poolserve.backends.torch_model.module import PoolingModule
from poolserve.backends.torch_model.sequence_head import SequenceHead
from poolserve.engine.collate import Batch, collate, text_item
from poolserve.engine.work import RequestGroup

VOCAB = 120
SMALL = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
}
CPU = torch.device("cpu")

FAMILIES: dict[str, Callable[[], Any]] = {
    # BertPooler, then a Linear (ms-marco-MiniLM, bge-reranker-base's ancestors, classifiers).
    "bert": lambda: transformers.BertForSequenceClassification(
        transformers.BertConfig(**SMALL, num_labels=1)
    ),
    # RobertaClassificationHead (bge-reranker-v2-m3, XLM-R classifiers); positions from 2.
    "xlm-roberta": lambda: transformers.XLMRobertaForSequenceClassification(
        transformers.XLMRobertaConfig(**SMALL, pad_token_id=1, num_labels=2)
    ),
    "electra": lambda: transformers.ElectraForSequenceClassification(
        transformers.ElectraConfig(**SMALL, embedding_size=32, num_labels=1)
    ),
    "mpnet": lambda: transformers.MPNetForSequenceClassification(
        transformers.MPNetConfig(**SMALL, num_labels=1)
    ),
    # Its prediction head on [CLS]; local-attention layers with their own window.
    "modernbert": lambda: transformers.ModernBertForSequenceClassification(
        transformers.ModernBertConfig(
            **SMALL, pad_token_id=0, classifier_pooling="cls", local_attention=16, num_labels=1
        )
    ),
    # pre_classifier + ReLU; no token types.
    "distilbert": lambda: transformers.DistilBertForSequenceClassification(
        transformers.DistilBertConfig(
            vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64, num_labels=3
        )
    ),
    # A decoder's score layer at the rightmost token that is not padding (Qwen3-Reranker-seq-cls).
    "qwen3": lambda: transformers.Qwen3ForSequenceClassification(
        transformers.Qwen3Config(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            pad_token_id=0,
            num_labels=1,
        )
    ),
}


def classifier(make: Callable[[], Any]) -> PoolingModule:
    torch.manual_seed(0)
    return PoolingModule("cross_encoder", make().eval(), pooling_modes=())


def check(module: PoolingModule) -> str | None:
    return pack_if_checked(
        module,
        heads=("classify",),
        max_model_len=128,
        own_code=False,
        dtype="float32",
        device=CPU,
    )


def pairs(
    pad_token_id: int, with_types: bool, decoder: bool
) -> list[tuple[list[int], list[int] | None]]:
    """Query-document pairs of 6-70 tokens. For a decoder, some end in its padding id, which
    transformers' head skips (an encoder's tokenizer never puts its padding id in a text, and
    RoBERTa-style positions would count it as padding)."""
    rng = np.random.default_rng(0)
    items = []
    for index, length in enumerate(rng.integers(6, 70, size=11)):
        ids = [int(token) for token in rng.integers(2, VOCAB, size=length)]
        if decoder and index % 4 == 3:
            ids[-1] = pad_token_id
        query = int(length) // 3
        types = [0] * query + [1] * (int(length) - query) if with_types else None
        items.append((ids, types))
    return items


def tensors(batch: Batch) -> dict[str, torch.Tensor]:
    types = batch.token_type_ids
    return {
        "input_ids": torch.from_numpy(batch.input_ids),
        **({"token_type_ids": torch.from_numpy(types)} if types is not None else {}),
    }


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_packed_batch_gives_each_pair_its_padded_logits(family: str) -> None:
    module = classifier(FAMILIES[family])
    assert check(module) is None
    assert module.packs("classify") and module.sequence_head is not None
    pad = int(module.backbone.config.pad_token_id or 0)
    decoder = module.sequence_head.reads == "last"
    group = RequestGroup(11)
    items = [
        text_item(group, index, ids, types, head="classify")
        for index, (ids, types) in enumerate(pairs(pad, module.takes_token_types, decoder))
    ]
    padded = collate(items, packed=False, pad_token_id=pad)
    packed = collate(items, packed=True, pad_token_id=pad, hidden_size=32, max_row_length=128)
    assert packed.packed is not None and packed.input_ids.shape[0] < len(items)
    with torch.inference_mode():
        expected = module(
            "classify",
            attention_mask=torch.from_numpy(padded.attention_mask),
            **tensors(padded),
        )
        got = module.forward_packed(
            "classify",
            *(torch.from_numpy(array) for array in (packed.input_ids, *packed.packed.arrays())),
            token_type_ids=tensors(packed).get("token_type_ids"),
        )
    assert got.shape == expected.shape
    np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=2e-6, rtol=1e-5)


def test_heads_that_cannot_be_applied_per_sequence_run_padded() -> None:
    # ALBERT's pooler activation lives in the model's forward: not taken apart.
    albert = classifier(
        lambda: transformers.AlbertForSequenceClassification(
            transformers.AlbertConfig(**SMALL, embedding_size=16, num_labels=1)
        )
    )
    assert "cannot apply AlbertForSequenceClassification's head" in str(check(albert))
    # DeBERTa's relative attention fails on a packed mask: caught by the trial, not raised.
    deberta = classifier(
        lambda: transformers.DebertaV2ForSequenceClassification(
            transformers.DebertaV2Config(
                **SMALL, relative_attention=True, pos_att_type=["p2c", "c2p"], num_labels=1
            )
        )
    )
    assert "fails on a packed row" in str(check(deberta))
    for module in (albert, deberta):
        assert module.packing is None and not module.packs("classify")


def test_a_head_read_at_the_wrong_position_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    module = classifier(FAMILIES["bert"])
    right = SequenceHead.of(module.backbone)
    assert right is not None and right.reads == "first"
    wrong = SequenceHead("last", right.logits)
    monkeypatch.setattr(SequenceHead, "of", classmethod(lambda cls, model: wrong))
    assert "gives other logits" in str(check(module))
    assert module.packing is None and module.sequence_head is None
