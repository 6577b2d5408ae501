"""Chat-style inputs: a conversation rendered with the model's own chat template into the text
that is embedded (instruction-tuned embedders, such as Qwen3-Embedding, carry one).

The template is the checkpoint's (`chat_template.jinja`, `chat_template.json`, or
tokenizer_config.json's `chat_template`), rendered by transformers' public
`apply_chat_template`, so a conversation reads exactly as the model's own tokenizer renders it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poolserve.errors import InvalidRequestError

Conversation = list[dict[str, Any]]
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def has_chat_template(directory: Path) -> bool:
    """Whether the checkpoint carries a chat template (read without loading a tokenizer)."""
    if any((directory / name).is_file() for name in TEMPLATE_FILES):
        return True
    config = directory / "tokenizer_config.json"
    return config.is_file() and bool(json.loads(config.read_text("utf-8")).get("chat_template"))


class ChatTemplate:
    """A model's chat template; `render` is thread-safe (it only reads the tokenizer)."""

    def __init__(self, directory: Path) -> None:
        from transformers import AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(str(directory))

    @classmethod
    def of(cls, directory: Path) -> ChatTemplate | None:
        return cls(directory) if has_chat_template(directory) else None

    def render(self, conversation: Conversation, options: ChatOptions) -> str:
        """The conversation as the template writes it; a template's own refusal ("roles must
        alternate") is a 400 with its words."""
        from jinja2 import TemplateError

        try:
            text = self._tokenizer.apply_chat_template(
                conversation,
                tokenize=False,
                add_generation_prompt=options.add_generation_prompt,
                continue_final_message=options.continue_final_message,
                **options.template_kwargs,
            )
        except (TemplateError, ValueError, TypeError) as exc:
            raise InvalidRequestError(
                f"the model's chat template cannot render these messages: {exc}",
                param="messages",
            ) from None
        return str(text)


@dataclass(frozen=True)
class ChatOptions:
    """How a request's conversation is rendered (vLLM's chat embedding options)."""

    template: ChatTemplate
    add_generation_prompt: bool = False
    continue_final_message: bool = False
    template_kwargs: dict[str, Any] = field(default_factory=dict)

    def render_all(self, conversations: Sequence[Conversation]) -> list[str]:
        return [self.template.render(conversation, self) for conversation in conversations]
