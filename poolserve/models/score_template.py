"""How a causal LM scores a query-document pair (an LLM reranker): the text it reads, and which
next-token logits become the score.

Qwen3-Reranker and bge-reranker-v2-gemma are plain causal LMs: the pair is written into a prompt
that asks "does the document answer the query? yes or no", and the score is read from the logits
of the next token at the last position. A `ScoreTemplate` says that prompt as segments, each
tokenized on its own without special tokens (as the model cards tokenize them: where the card
tokenizes two pieces separately, joining them first could merge tokens across the seam), with
`{query}`, `{document}` and `{instruction}` filled in. The score's logit is
`logit(yes) - logit(no)` (so its sigmoid is the card's softmax over the two), or `logit(yes)`
where the template names no `no` token (bge-reranker-v2-gemma, whose card reads the raw logit).

A template file (`--score-template FILE`, JSON) holds the same fields:

    {"segments": ["<bos>", "A: {query}", "\\n", "B: {document}", "\\n", "Is B relevant?"],
     "yes": "Yes", "no": null, "instruction": ""}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from poolserve.errors import ModelLoadError, SettingError

_FIELD = re.compile(r"\{(query|document|instruction)\}")


@dataclass(frozen=True)
class ScoreTemplate:
    name: str
    segments: tuple[str, ...]
    yes: str
    no: str | None = None
    instruction: str = ""
    # The yes (and no) token ids in the model's vocabulary, once resolved against its tokenizer.
    token_ids: tuple[int, ...] = field(default=(), compare=False)

    def fill(self, query: str, document: str) -> list[str]:
        """The segments with the pair filled in (in one pass: a query that contains the text
        `{document}` stays as it is)."""
        values = {"query": query, "document": document, "instruction": self.instruction}
        return [_FIELD.sub(lambda match: values[match.group(1)], part) for part in self.segments]


QWEN3_RERANKER = ScoreTemplate(
    name="Qwen3-Reranker",
    segments=(
        "<|im_start|>system\nJudge whether the Document meets the requirements based on the "
        'Query and the Instruct provided. Note that the answer can only be "yes" or "no".'
        "<|im_end|>\n<|im_start|>user\n",
        "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}",
        "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    ),
    yes="yes",
    no="no",
    instruction="Given a web search query, retrieve relevant passages that answer the query",
)

BGE_GEMMA_RERANKER = ScoreTemplate(
    name="bge-reranker-v2-gemma",
    segments=(
        "<bos>",
        "A: {query}",
        "\n",
        "B: {document}",
        "\n",
        "Given a query A and a passage B, determine whether the passage contains an answer to "
        "the query by providing a prediction of either 'Yes' or 'No'.",
    ),
    yes="Yes",
)

# The template of each family, by config.json's model_type.
BUILT_IN: dict[str, ScoreTemplate] = {
    "qwen3": QWEN3_RERANKER,
    "gemma": BGE_GEMMA_RERANKER,
}

_KEYS = {"segments", "yes", "no", "instruction"}


def read_score_template(path: str | Path) -> ScoreTemplate:
    """A template from a JSON file; SettingError (one line) if it cannot work."""
    path = Path(path)
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SettingError(f"--score-template {path}: cannot read it: {exc}") from exc
    if not isinstance(data, dict):
        raise SettingError(f"--score-template {path}: a JSON object is needed")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise SettingError(
            f"--score-template {path}: unknown key {unknown[0]!r} "
            f"(keys: {', '.join(sorted(_KEYS))})"
        )
    segments = data.get("segments")
    if not isinstance(segments, list) or not all(isinstance(s, str) for s in segments):
        raise SettingError(f"--score-template {path}: `segments` must be a list of strings")
    text = "".join(segments)
    for needed in ("{query}", "{document}"):
        if needed not in text:
            raise SettingError(f"--score-template {path}: no segment holds {needed}")
    yes, no, instruction = data.get("yes"), data.get("no"), data.get("instruction", "")
    if not isinstance(yes, str) or not yes:
        raise SettingError(f"--score-template {path}: `yes` must name the token that means yes")
    if no is not None and (not isinstance(no, str) or not no):
        raise SettingError(f"--score-template {path}: `no` must be a token or null")
    if not isinstance(instruction, str):
        raise SettingError(f"--score-template {path}: `instruction` must be a string")
    return ScoreTemplate(
        name=path.name, segments=tuple(segments), yes=yes, no=no, instruction=instruction
    )


def template_for(model_type: str, path: str | None, directory: Path) -> ScoreTemplate:
    """The file's template, else the built-in one of the model's family."""
    if path is not None:
        return read_score_template(path)
    if model_type in BUILT_IN:
        return BUILT_IN[model_type]
    raise SettingError(
        f"{directory} is a causal LM of family {model_type!r}, which has no built-in reranking "
        f"template (built in: {', '.join(sorted(BUILT_IN))}); pass --score-template FILE saying "
        "its prompt and its yes/no tokens"
    )


def with_token_ids(template: ScoreTemplate, encode: Any) -> ScoreTemplate:
    """The template with its yes/no token ids, each of which must be one token of the
    vocabulary (`encode(text)` gives a text's ids without special tokens)."""
    ids = []
    for word in (template.yes, template.no):
        if word is None:
            continue
        encoded = list(encode(word))
        if len(encoded) != 1:
            raise ModelLoadError(
                f"score template {template.name}: {word!r} is {len(encoded)} tokens in this "
                "model's vocabulary, not one; name a single token in the template's yes/no"
            )
        ids.append(int(encoded[0]))
    return replace(template, token_ids=tuple(ids))
