"""Loading recorded pydantic-ai histories from JSON files, with errors that name the file and message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
)

from ..errors import ContextError


class HistoryLoadError(ContextError, ValueError):
    """A recorded history could not be loaded: the message names the file and, for validation
    failures, the index of the offending message."""


def load_history(path: str | Path) -> list[ModelMessage] | list[list[ModelMessage]]:
    """Load a pydantic-ai JSON history (as written by `ModelMessagesTypeAdapter`), or a JSON list of them.

    Returns the history, or a list of histories when the file holds a list of lists. Raises
    `HistoryLoadError` naming the file for an unreadable file, invalid JSON, or a history that
    fails validation (with the index of the offending message).

    Example:
        ```python
        import tempfile
        from pathlib import Path

        from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, UserPromptPart

        from pydantic_ai_context.replay import load_history

        log = [ModelRequest(parts=[UserPromptPart('hi')])]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / 'run.json'
            path.write_bytes(ModelMessagesTypeAdapter.dump_json(log))
            assert load_history(path) == log
        ```
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise HistoryLoadError(f'{path}: cannot read the file ({exc.strerror or exc})') from exc
    if not raw.strip():
        raise HistoryLoadError(f'{path}: the file is empty (expected a JSON list of pydantic-ai messages)')
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HistoryLoadError(f'{path}: not valid JSON ({exc})') from exc
    if not isinstance(data, list):
        raise HistoryLoadError(f'{path}: expected a JSON list of messages (or a list of such lists)')
    if data and all(isinstance(item, list) for item in data):
        return [_validate(path, item, history=n) for n, item in enumerate(data)]
    return _validate(path, data)


def load_histories(path: str | Path) -> list[list[ModelMessage]]:
    """Like `load_history`, but always a list of histories (one for a single-history file)."""
    loaded = load_history(path)
    if loaded and isinstance(loaded[0], list):
        return [h for h in loaded if isinstance(h, list)]
    return [loaded] if loaded else []  # type: ignore[list-item]


def _validate(path: Path, data: list[Any], *, history: int | None = None) -> list[ModelMessage]:
    where = f'{path}' if history is None else f'{path}: history {history}'
    try:
        return ModelMessagesTypeAdapter.validate_python(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        loc = first.get('loc', ())
        index = loc[0] if loc and isinstance(loc[0], int) else None
        at = f'message {index}' if index is not None else 'the history'
        rest = '.'.join(str(x) for x in loc[1:]) if index is not None else '.'.join(str(x) for x in loc)
        detail = f'{first.get("msg", "invalid")}' + (f' at {rest}' if rest else '')
        item = data[index] if index is not None and index < len(data) else None
        hint = ''
        if isinstance(item, dict) and 'role' in item and 'kind' not in item:
            hint = (
                '; it looks like OpenAI chat format: convert it with pydantic_ai_context.from_openai '
                'and save ModelMessagesTypeAdapter.dump_json(messages)'
            )
        raise HistoryLoadError(
            f'{where}: {at} is not a valid pydantic-ai message: {detail} ({exc.error_count()} error(s)){hint}'
        ) from exc
