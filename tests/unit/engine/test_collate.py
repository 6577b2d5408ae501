"""Collating work items into right-padded tensors."""

from __future__ import annotations

from poolserve.engine.collate import collate
from poolserve.engine.work import RequestGroup, WorkItem


def test_right_padding_and_mask() -> None:
    group = RequestGroup(3)
    items = [
        WorkItem(group, 0, [101, 7, 102]),
        WorkItem(group, 1, [101, 102]),
        WorkItem(group, 2, [101, 5, 6, 8, 102], token_type_ids=[0, 0, 1, 1, 1]),
    ]
    batch = collate(items, pad_token_id=9)
    assert batch.items == items
    assert batch.input_ids.tolist() == [
        [101, 7, 102, 9, 9],
        [101, 102, 9, 9, 9],
        [101, 5, 6, 8, 102],
    ]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert batch.token_type_ids is not None
    assert batch.token_type_ids.tolist() == [[0] * 5, [0] * 5, [0, 0, 1, 1, 1]]
    assert batch.padded_tokens == 15


def test_no_token_types_when_no_item_has_them() -> None:
    group = RequestGroup(1)
    batch = collate([WorkItem(group, 0, [1, 2])], pad_token_id=0)
    assert batch.token_type_ids is None
    assert batch.padded_tokens == 2
