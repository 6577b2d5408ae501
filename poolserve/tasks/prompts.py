"""A model's prompts ("query: ", "passage: ", an instruction): read once at load, resolved per
request as sentence-transformers does.

The prompts come from config_sentence_transformers.json (`prompts`, `default_prompt_name`) and
`--prompt NAME=TEXT`. A request names one (`prompt_name`) or gives its text (`prompt`); with
neither, the model's default prompt applies. The prompt is put before each text input and its
tokens are embedded and counted with the text's; a model whose Pooling config says
`include_prompt: false` leaves them out of the mean (tasks/embed.py). Token-id inputs are taken
as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from poolserve.errors import InvalidRequestError, SettingError, echoed

# Cohere's input_type, and the prompt names that serve it, the first the model has wins.
INPUT_TYPE_PROMPTS = {
    "search_query": ("search_query", "query"),
    "search_document": ("search_document", "document", "passage"),
    "classification": ("classification",),
    "clustering": ("clustering",),
}


@dataclass(frozen=True)
class Prompts:
    known: Mapping[str, str] = field(default_factory=dict)
    default_name: str | None = None

    def resolve(self, prompt_name: str | None, prompt: str | None) -> str | None:
        """The prompt text a request asks for (None: no prompt)."""
        if prompt is not None and prompt_name is not None:
            raise InvalidRequestError(
                "give `prompt` (the text) or `prompt_name` (one of the model's), not both",
                param="prompt",
            )
        if prompt is None:
            if prompt_name is None:
                prompt_name = self.default_name
                if prompt_name is None:
                    return None
            elif prompt_name not in self.known:
                raise InvalidRequestError(self._unknown(prompt_name), param="prompt_name")
            prompt = self.known[prompt_name]
        return prompt or None

    def for_input_type(self, input_type: str | None) -> str | None:
        """The prompt of a Cohere `input_type` (INPUT_TYPE_PROMPTS): the first of its names
        the model has, else the default prompt."""
        names = INPUT_TYPE_PROMPTS.get(input_type or "", ())
        name = next((name for name in names if name in self.known), None)
        return self.resolve(name, None)

    def _unknown(self, name: str) -> str:
        name = echoed(name, 64)
        if not self.known:
            return (
                f"unknown prompt_name {name!r}: this model has no prompts; send the text as "
                "`prompt`, or start the server with --prompt NAME=TEXT"
            )
        return f"unknown prompt_name {name!r}; this model's prompts: " + ", ".join(
            sorted(self.known)
        )

    def card(self) -> dict[str, Any]:
        """What `/v1/models` says about them."""
        return {"prompts": dict(self.known), "default_prompt_name": self.default_name}


def read_prompts(st_config: Mapping[str, Any], given: tuple[tuple[str, str], ...]) -> Prompts:
    """The model's prompts with `given` over them; refuses (one line) a default prompt the
    model does not define."""
    known = {str(name): str(text) for name, text in (st_config.get("prompts") or {}).items()}
    known.update(given)
    default = st_config.get("default_prompt_name")
    if default is not None and default not in known:
        raise SettingError(
            f"the model's default_prompt_name {default!r} is not among its prompts "
            f"({', '.join(sorted(known)) or 'none'}); add it with --prompt {default}=TEXT"
        )
    return Prompts(known, default)
