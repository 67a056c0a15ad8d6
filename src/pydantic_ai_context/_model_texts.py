"""The replay measure "model texts kept": how much of the agent's own reasoning a view still shows.

A model text is a response `TextPart` of at least `MIN_CHARS` characters: the agent's thoughts,
plans and decisions (shorter texts are acknowledgements and tags). A text is kept by a view when
its content appears verbatim somewhere in the view: as a part of its own, or inside a record
(a collapsed run's record quotes it). A shortened text is not kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart

__all__ = ('MIN_CHARS', 'ModelTexts')

MIN_CHARS: Final = 40
"""Texts shorter than this are not counted."""


@dataclass(frozen=True)
class ModelTexts:
    """The model texts of a log, with where each appears, to measure what a view keeps of them.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

        from pydantic_ai_context._model_texts import ModelTexts

        thought = 'THOUGHT: the failing test imports a module that was renamed.'
        log = [
            ModelRequest(parts=[UserPromptPart('fix it')]),
            ModelResponse(parts=[TextPart(thought)]),
            ModelRequest(parts=[UserPromptPart('go on')]),
            ModelResponse(parts=[TextPart('ok')]),
        ]
        texts = ModelTexts.build(log)
        assert texts.kept(3, log[:3]) == 1.0
        assert texts.kept(3, log[:1]) == 0.0
        assert texts.kept(1, log[:1]) == 1.0  # no text yet: nothing could be lost
        ```
    """

    texts: tuple[str, ...]
    """Every model text of the log, in order."""
    positions: tuple[int, ...]
    """For each text, the index of the response that holds it."""

    @classmethod
    def build(cls, messages: Sequence[ModelMessage]) -> ModelTexts:
        texts: list[str] = []
        positions: list[int] = []
        for i, message in enumerate(messages):
            if not isinstance(message, ModelResponse):
                continue
            for part in message.parts:
                if isinstance(part, TextPart) and len(part.content.strip()) >= MIN_CHARS:
                    texts.append(part.content)
                    positions.append(i)
        return cls(tuple(texts), tuple(positions))

    def before(self, index: int) -> list[str]:
        """The texts of the responses before message `index`."""
        return [t for t, p in zip(self.texts, self.positions, strict=True) if p < index]

    def kept(self, index: int, view: Sequence[ModelMessage]) -> float:
        """The share of the texts before message `index` that `view` shows verbatim (1.0 with none)."""
        wanted = self.before(index)
        if not wanted:
            return 1.0
        whole: set[str] = set()
        contents: list[str] = []
        for message in view:
            for part in message.parts:
                content = getattr(part, 'content', None)
                if isinstance(content, str):
                    whole.add(content)
                    contents.append(content)
        haystack: str | None = None
        kept = 0
        for text in wanted:
            if text in whole:
                kept += 1
                continue
            if haystack is None:
                # Only texts quoted inside a longer part need the search.
                haystack = '\x00'.join(contents)
            if text in haystack:
                kept += 1
        return kept / len(wanted)
