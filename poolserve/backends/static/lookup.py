"""A static model's table in memory, and a whole batch looked up at once: one gather of the
batch's rows, then each text's sum over its slice of them.

The rules are the libraries' (models/static_layout.py): a vocabulary-quantized model2vec model
maps each token id to a row (`mapping`) and scales it by the token's weight (`weights`); the
mean divides by the tokens kept (model2vec leaves its unknown token out); a text with no tokens
left has a zero vector. Means are float32 whatever the table's dtype (float16 and int8 rows are
widened as they are gathered)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from poolserve.errors import ModelLoadError
from poolserve.models.static_layout import StaticTable
from poolserve.models.tensor_file import TensorFile


@dataclass(frozen=True)
class LoadedTable:
    table: np.ndarray
    # Token id -> row (None: the token id is the row) and token id -> weight (None: 1).
    mapping: np.ndarray | None
    weights: np.ndarray | None
    unknown_id: int | None
    # What the rows are summed in: float64 where the table or its weights are (model2vec
    # distills its weights in float64 and multiplies and averages in it), else float32.
    sums_dtype: np.dtype[np.floating]

    @classmethod
    def load(cls, static: StaticTable) -> LoadedTable:
        """The table memory-mapped, checked against the tokenizer: every token id it can give
        has a row (ModelLoadError, one line, where not)."""
        tensors = TensorFile.open(static.table_file)
        table = np.asarray(tensors.array(static.tensor))
        mapping = weights = None
        rows_needed = static.vocab_size
        if static.mapping is not None:
            mapping = np.asarray(tensors.array(static.mapping)).astype(np.int64)
            _check_covers(static, static.mapping, mapping)
            if mapping.size and not 0 <= int(mapping.min()) <= int(mapping.max()) < len(table):
                raise ModelLoadError(
                    f"{static.table_file}: its mapping points outside its {len(table)} rows"
                )
        elif len(table) < rows_needed:
            raise ModelLoadError(
                f"{static.table_file} has {len(table)} rows, but its tokenizer gives token ids "
                f"up to {rows_needed - 1}"
            )
        if static.token_weights is not None:
            weights = np.asarray(tensors.array(static.token_weights))
            if weights.dtype.kind != "f":
                weights = weights.astype(np.float32)
            _check_covers(static, static.token_weights, weights)
        wide = table.dtype == np.float64 or (weights is not None and weights.dtype == np.float64)
        sums: np.dtype[np.floating] = np.dtype(np.float64) if wide else np.dtype(np.float32)
        return cls(table, mapping, weights, static.unknown_id, sums)

    @property
    def dim(self) -> int:
        return int(self.table.shape[1])

    def means(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """float32 [texts, dim]: the mean of each text's rows (`ids` end to end, `lengths`
        tokens each)."""
        ids, lengths = self._kept(ids, lengths)
        sums = np.zeros((len(lengths), self.dim), dtype=self.sums_dtype)
        rows = self._rows(ids)
        start = 0
        # A float32 sum per text over its slice of the rows, row after row as model2vec's
        # mean and sentence-transformers' EmbeddingBag add them (their vectors, bit for bit).
        # np.add.reduceat along the rows' axis walks them column by column: 2x slower (64
        # texts of 5-40 tokens, 256 dims: 753 against 382 µs with the gather).
        for text, end in enumerate(np.cumsum(lengths).tolist()):
            if end > start:
                np.add.reduce(rows[start:end], axis=0, out=sums[text])
            start = end
        sums /= np.maximum(lengths, 1)[:, None].astype(sums.dtype)
        means: np.ndarray = sums.astype(np.float32, copy=False)
        return means

    def token_vectors(self, ids: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
        """Each text's rows, float32 [tokens, dim] (model2vec's `encode_as_sequence`)."""
        ids, lengths = self._kept(ids, lengths)
        rows = self._rows(ids).astype(np.float32, copy=False)
        return np.split(rows, np.cumsum(lengths)[:-1])

    def _kept(self, ids: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ids without the unknown token where the model leaves it out, and the counts."""
        if self.unknown_id is None:
            return ids, lengths
        keep = ids != self.unknown_id
        if keep.all():
            return ids, lengths
        texts = np.repeat(np.arange(len(lengths)), lengths)
        return ids[keep], np.bincount(texts[keep], minlength=len(lengths)).astype(np.int64)

    def _rows(self, ids: np.ndarray) -> np.ndarray:
        gathered = self.table[ids if self.mapping is None else self.mapping[ids]]
        rows: np.ndarray = gathered.astype(self.sums_dtype, copy=False)
        if self.weights is not None:
            rows *= self.weights[ids][:, None]
        return rows


def _check_covers(static: StaticTable, name: str, array: np.ndarray) -> None:
    if array.ndim != 1 or len(array) < static.vocab_size:
        raise ModelLoadError(
            f"{static.table_file}: its {name} has {len(array)} entries, but its tokenizer gives "
            f"{static.vocab_size} token ids"
        )
