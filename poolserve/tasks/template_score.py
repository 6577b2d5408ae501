"""Scoring pairs with an LLM reranker: each (query, document) pair written into the model's
prompt template (models/score_template.py) and scored by its next-token logits.

Cutting: `max_tokens_per_doc` cuts each document first; `truncate_prompt_tokens` then cuts the
document's end until the whole prompt fits (the template's own text and the query are kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np

from poolserve.engine.context import ServeContext
from poolserve.errors import InputTooLongError, InvalidRequestError, SettingError
from poolserve.inputs.tokenizer import TextTokenizer, TokenizedText
from poolserve.models.score_template import ScoreTemplate
from poolserve.tasks.classify import ClassifierHead
from poolserve.tasks.input_steps import bound_text, param_of
from poolserve.tasks.score import ScoreRequest, text_namer

# Cutting the document by the overflow's token count leaves the prompt a token or two off where
# tokens merge across the cut; a few more passes settle it.
_CUT_PASSES = 4


class TemplateScorer:
    names: tuple[str, ...] = ()

    def __init__(
        self, *, max_model_len: int, template: ScoreTemplate, classifier: ClassifierHead
    ) -> None:
        self.max_model_len = max_model_len
        self.template = template
        self.classifier = classifier

    def check_room(self, tokenizer: TextTokenizer) -> None:
        """Refuse to start where the prompt template alone fills the model's length: every
        pair would be refused."""
        needs = len(self.encode(tokenizer, "", ""))
        if needs >= self.max_model_len:
            raise SettingError(
                f"--max-model-len {self.max_model_len} leaves no room for a query or a document "
                f"in {self.template.name}'s prompt, which takes {needs} tokens of its own; "
                "raise it"
            )

    def inputs(self, request: ScoreRequest) -> Sequence[Any]:
        return request.pairs

    def encode(self, tokenizer: TextTokenizer, query: str, document: str) -> list[int]:
        """The prompt's token ids: each segment tokenized on its own, without special tokens."""
        parts = tokenizer.encode_batch(
            self.template.fill(query, document), truncate_to=None, add_special_tokens=False
        )
        return [token for part in parts for token in part]

    def preprocess(
        self,
        ctx: ServeContext[ScoreRequest],
        tokenizer: TextTokenizer,
        start: int,
        inputs: Sequence[Any],
    ) -> list[TokenizedText]:
        request, truncate = ctx.request, ctx.pooling_params.truncate_prompt_tokens
        if truncate is not None and ctx.pooling_params.truncation_side == "left":
            raise InvalidRequestError(
                f"{self.template.name}'s prompt is cut at the document's end; leave "
                "`truncation_side` out (or right)",
                param="truncation_side",
            )
        name, queries = text_namer(request), len(request.queries)
        # The prompt fits by cutting the document's end: as asked (`truncate_prompt_tokens`),
        # or by default on the rerank APIs (`fit_documents`).
        fitting = truncate is not None or request.fit_documents
        cutting = fitting or request.max_tokens_per_doc is not None
        limit = self.max_model_len if truncate is None else truncate
        results = []
        for offset, (query_index, doc_index) in enumerate(inputs):
            query = bound_text(
                tokenizer,
                request.queries[query_index],
                name(query_index),
                limit,
                truncate is not None or request.max_tokens_per_doc is not None,
            )
            document = bound_text(
                tokenizer, request.documents[doc_index], name(queries + doc_index), limit, cutting
            )
            if request.max_tokens_per_doc is not None:
                document = tokenizer.cut_text(document, request.max_tokens_per_doc)
            ids = self.encode(tokenizer, query, document)
            if fitting:
                ids = self._cut(tokenizer, query, document, ids, limit)
            if len(ids) > limit:
                self._refuse(
                    tokenizer,
                    query,
                    ids,
                    truncate,
                    pair=start + offset,
                    names=(name(query_index), name(queries + doc_index)),
                )
            results.append(TokenizedText(ids, None, "classify"))
        return results

    def _refuse(
        self,
        tokenizer: TextTokenizer,
        query: str,
        ids: list[int],
        truncate: int | None,
        *,
        pair: int,
        names: tuple[str, str],
    ) -> NoReturn:
        """Why a pair's prompt (`ids`, its document cut where cutting was asked) does not fit,
        in the words of what to change: the query, where with the template it fills the model's
        room before any document; the client's `truncate_prompt_tokens`, where it is below what
        the prompt needs and the model's limit is not; else the document."""
        query_name, document_name = names
        bare = len(self.encode(tokenizer, query, ""))
        if bare > self.max_model_len:
            raise InvalidRequestError(
                f"{query_name} takes {bare} tokens in {self.template.name}'s prompt before any "
                f"document, more than the {self.max_model_len} the model accepts; shorten it",
                param=param_of(query_name),
            )
        if truncate is not None and len(ids) <= self.max_model_len:
            raise InvalidRequestError(
                f"truncate_prompt_tokens {truncate} leaves no room for pair {pair}: "
                f"{self.template.name}'s prompt with the query takes {len(ids)} tokens even "
                f"with the document cut; raise it (at most the model's {self.max_model_len}; "
                "-1 for that)",
                param="truncate_prompt_tokens",
            )
        raise InputTooLongError(
            f"pair {pair} (query and document in {self.template.name}'s prompt)",
            f"has {len(ids)} tokens, but the model accepts at most {self.max_model_len}",
            cut_with="`truncate_prompt_tokens` (-1 for the model's maximum) or "
            "`max_tokens_per_doc`",
            param=param_of(document_name),
            index=pair,
        )

    def _cut(
        self, tokenizer: TextTokenizer, query: str, document: str, ids: list[int], limit: int
    ) -> list[int]:
        for _ in range(_CUT_PASSES):
            over = len(ids) - limit
            if over <= 0:
                break
            (document_ids,) = tokenizer.encode_batch(
                [document], truncate_to=None, add_special_tokens=False
            )
            if len(document_ids) == 0:
                break  # the query and the template alone are too long: refused by the caller
            document = tokenizer.cut_text(document, max(len(document_ids) - over, 0))
            ids = self.encode(tokenizer, query, document)
        return ids

    def scores(self, ctx: ServeContext[ScoreRequest], outputs: list[np.ndarray]) -> np.ndarray:
        logits = np.stack(outputs)[:, 0].astype(np.float64)
        if ctx.pooling_params.use_activation:
            return self.classifier.activate(logits)
        return logits
