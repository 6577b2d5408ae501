"""Scoring query-document pairs with a cross-encoder: each pair one input (its token types
marking the two texts), scored by the model's activation of its logit. A document too long for
the pair is cut to the room beside its query where the request fits documents (the rerank
APIs), or to `max_tokens_per_doc`; else refused."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from poolserve.engine.context import ServeContext
from poolserve.errors import InputTooLongError
from poolserve.inputs.tokenizer import TextTokenizer, TokenizedText
from poolserve.tasks.classify import ClassifierHead
from poolserve.tasks.input_steps import bound_text, param_of
from poolserve.tasks.score import ScoreRequest, document_limit, text_namer


class CrossEncoderScorer:
    names: tuple[str, ...] = ()

    def __init__(self, *, max_model_len: int, classifier: ClassifierHead) -> None:
        self.max_model_len = max_model_len
        self.classifier = classifier

    def inputs(self, request: ScoreRequest) -> Sequence[Any]:
        return request.pairs

    def preprocess(
        self,
        ctx: ServeContext[ScoreRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
    ) -> list[TokenizedText]:
        request, truncate = ctx.request, ctx.pooling_params.truncate_prompt_tokens
        side = ctx.pooling_params.truncation_side
        name, queries = text_namer(request), len(request.queries)
        # Fitting a document beside its query cuts its end (its start, on the left side: then
        # the tokenizer's cut of the pair does it); `truncate_prompt_tokens` cuts as asked.
        fitting = request.fit_documents and truncate is None
        cutting = truncate is not None or request.max_tokens_per_doc is not None or fitting

        def bounded(index: int) -> str:
            """Query or document `index` of `_texts(request)`, checked as every input is."""
            text = request.queries[index] if index < queries else request.documents[index - queries]
            assert isinstance(text, str)  # ScoreTask refuses images for a text-only scorer
            # Fitting cuts documents; a query too long for the model is refused.
            truncating = cutting if index >= queries else cutting and not fitting
            return bound_text(
                tokenizer, text, name(index), self.max_model_len, truncating, side=side
            )

        texts, query_tokens = [], dict[int, int]()
        for query_index, doc_index in inputs:
            query, document = bounded(query_index), bounded(queries + doc_index)
            room = self.max_model_len - tokenizer.num_pair_special_tokens
            if fitting:
                if query_index not in query_tokens:
                    query_tokens[query_index] = self._query_tokens(
                        tokenizer, query, name(query_index)
                    )
                room -= query_tokens[query_index]
            limit = document_limit(request, room) if fitting else request.max_tokens_per_doc
            if fitting and side == "left":
                limit = request.max_tokens_per_doc
            texts.append(
                (query, document if limit is None else tokenizer.cut_text(document, limit))
            )
        encoded = tokenizer.encode_pairs(
            texts,
            # Fitted pairs fit; cutting them again to the limit is only a guard at the edge of
            # a cut, where tokenizing a prefix gives a token more than counted.
            truncate_to=self.max_model_len if fitting else truncate,
            side=side,
        )
        for offset, (ids, _) in enumerate(encoded):
            if len(ids) > self.max_model_len:
                document = name(queries + inputs[offset][1])
                raise InputTooLongError(
                    f"pair {start + offset} (query and document together)",
                    f"has {len(ids)} tokens, but the model accepts at most {self.max_model_len}",
                    cut_with="`truncate_prompt_tokens` (-1 for the model's maximum) or "
                    "`max_tokens_per_doc`",
                    param=param_of(document),
                    index=start + offset,
                )
        return [TokenizedText(ids, types, "classify") for ids, types in encoded]

    def _query_tokens(self, tokenizer: TextTokenizer, query: str, where: str) -> int:
        """The query's own tokens, refused where they leave no room for a document."""
        tokens = len(tokenizer.leading_tokens(query, self.max_model_len).ids)
        if tokens + tokenizer.num_pair_special_tokens >= self.max_model_len:
            raise InputTooLongError(
                where,
                f"has {tokens} tokens, which leave no room for a document beside it in the "
                f"{self.max_model_len} the model accepts for the pair",
                cut_with="`truncate_prompt_tokens` (-1 for the model's maximum)",
                param=where.split("[")[0],
            )
        return tokens

    def scores(self, ctx: ServeContext[ScoreRequest], outputs: list[np.ndarray]) -> np.ndarray:
        logits = np.stack(outputs)[:, 0].astype(np.float64)
        if ctx.pooling_params.use_activation:
            return self.classifier.activate(logits)
        return logits
