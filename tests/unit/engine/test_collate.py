"""Collating work items into right-padded tensors, and into packed rows."""

from __future__ import annotations

from poolserve.engine.collate import collate, packed_layout, text_item
from poolserve.engine.work import RequestGroup


def test_right_padding_and_mask() -> None:
    group = RequestGroup(3)
    items = [
        text_item(group, 0, [101, 7, 102]),
        text_item(group, 1, [101, 102]),
        text_item(group, 2, [101, 5, 6, 8, 102], token_type_ids=[0, 0, 1, 1, 1]),
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
    batch = collate([text_item(group, 0, [1, 2])], pad_token_id=0)
    assert batch.token_type_ids is None
    assert batch.padded_tokens == 2


def test_packed_rows_lay_items_end_to_end_longest_first() -> None:
    group = RequestGroup(4)
    items = [
        text_item(group, 0, [11, 12]),
        text_item(group, 1, [21, 22, 23, 24, 25]),
        text_item(group, 2, [31, 32, 33], token_type_ids=[0, 1, 1]),
        text_item(group, 3, [41, 42, 43, 44], pool_from=1),
    ]
    batch = collate(items, True, pad_token_id=9, max_row_length=5)
    packed = batch.packed
    assert packed is not None
    # Rows of 5 (the longest): 5 | 4 | 3 + 2 (first fit, longest first).
    assert batch.input_ids.tolist() == [
        [21, 22, 23, 24, 25],
        [41, 42, 43, 44, 9],
        [31, 32, 33, 11, 12],
    ]
    assert packed.segments.tolist() == [[1] * 5, [3, 3, 3, 3, -1], [2, 2, 2, 0, 0]]
    assert packed.positions.tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 0], [0, 1, 2, 0, 1]]
    assert packed.pool_weights.tolist() == [[1] * 5, [0, 1, 1, 1, 0], [1] * 5]
    assert batch.attention_mask.tolist() == [[1] * 5, [1, 1, 1, 1, 0], [1] * 5]
    assert batch.token_type_ids is not None
    assert batch.token_type_ids.tolist() == [[0] * 5, [0] * 5, [0, 1, 1, 0, 0]]
    assert packed.places == ((2, 3), (0, 0), (2, 0), (1, 0))
    assert packed.first.tolist() == [13, 0, 10, 5]
    assert packed.last.tolist() == [14, 4, 12, 8]
    assert batch.padded_tokens == 15


def test_the_row_length_is_the_cheapest_of_the_candidates() -> None:
    """Lengths of 33 and 31: rows of the longest (33) hold one each; rows of 64 hold two."""
    length, rows = packed_layout([33, 31, 33, 31], hidden_size=384, max_row_length=256)
    assert length == 64 and sorted(map(sorted, rows)) == [[0, 1], [2, 3]]
    # One row may take the longest's length exactly; several rows take a length in steps of
    # 16 (the linear layers see a few token counts, not a new one each batch).
    assert packed_layout([20], hidden_size=384, max_row_length=256) == (20, [[0]])
    assert packed_layout([20, 13], hidden_size=384, max_row_length=256) == (32, [[0], [1]])
    assert packed_layout([40, 40], hidden_size=384, max_row_length=256) == (48, [[0], [1]])
    for count in range(2, 40):
        lengths = [(7 * i) % 60 + 3 for i in range(count)]
        length, rows = packed_layout(lengths, hidden_size=384, max_row_length=256)
        assert len(rows) == 1 or length % 16 == 0
        assert sorted(i for row in rows for i in row) == list(range(count))
    # Never longer than the model's length limit (which then may be a row's length), unless
    # an item is (a late-interaction document may be cut to another length than a query).
    assert packed_layout([33, 31], hidden_size=384, max_row_length=40)[0] == 40
    assert packed_layout([180, 20], hidden_size=384, max_row_length=179) == (180, [[0], [1]])
    assert packed_layout([181, 100], hidden_size=384, max_row_length=256) == (192, [[0], [1]])


def test_an_item_with_its_own_attention_mask_is_collated_padded() -> None:
    group = RequestGroup(2)
    items = [text_item(group, 0, [1, 2, 3], attention_mask=[1, 1, 0]), text_item(group, 1, [4])]
    batch = collate(items, True, pad_token_id=0)
    assert batch.packed is None
    assert batch.attention_mask.tolist() == [[1, 1, 0], [1, 0, 0]]
