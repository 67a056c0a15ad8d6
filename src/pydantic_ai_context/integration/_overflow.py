"""Recognising a provider's "the input is too long" rejection, and the limit it states.

pydantic-ai 2.x raises `ModelContextWindowExceededError` where it recognises the rejection;
older versions (and providers it does not map) raise a `ModelHTTPError` (400 or 413) whose
message or body says so. Messages are matched by a few fixed phrases; numbers are read with
bounded patterns on a bounded prefix of the text, so a hostile error body cannot stall us.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

_SCAN_CHARS: Final = 4_000
"""Only the start of an error's text is read: the phrase and numbers come first in every provider's message."""

_PHRASES: Final = (
    'context length',
    'context window',
    'context_length_exceeded',
    'maximum context',
    'prompt is too long',
    'input is too long',
    'too many tokens',
    'too many input tokens',
    'exceeds the maximum number of tokens',
    'request too large',
    'reduce the length',
    'maximum prompt length',
    'input token count',
)

_NUMBER: Final = r'(\d{1,3}(?:,\d{3}){1,3}|\d{1,10})'
# Each pattern names the limit the provider states; requested counts are read where given.
_LIMIT_RES: Final = (
    # OpenAI: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens"
    re.compile(r'maximum context length is ' + _NUMBER + r' tokens'),
    # Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"
    re.compile(r'tokens? > ' + _NUMBER + r' maximum'),
    # Gemini: "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)"
    re.compile(r'maximum number of tokens allowed \(' + _NUMBER + r'\)'),
    # Generic phrasings: "context window of 20000 tokens", "limit of 20,000 tokens", "max 8192 tokens"
    re.compile(r'(?:context window|limit|max(?:imum)?) (?:of |is )?' + _NUMBER + r' tokens'),
)
_REQUESTED_RES: Final = (
    re.compile(r'(?:resulted in|requested|prompt is too long:|input token count \(?) ?' + _NUMBER),
)


@dataclass(frozen=True)
class Overflow:
    """A provider rejection of the input as too long."""

    limit: int | None
    """The context window the provider stated, if it stated one."""
    requested: int | None
    """The input tokens the provider says the request had, if it said."""
    message: str
    """A short description: the error's type and, if any, HTTP status (never its body)."""


def context_overflow(error: BaseException) -> Overflow | None:
    """The overflow `error` reports, or `None` if it is not a "too long" rejection.

    An exception group (a `FallbackExceptionGroup`: every model of a `FallbackModel` failed) is an
    overflow when one of its errors is: a tighter request may then succeed. The smallest limit
    stated among them wins.
    """
    from pydantic_ai import exceptions

    if isinstance(error, BaseExceptionGroup):
        found = [o for o in map(context_overflow, error.exceptions) if o is not None]
        if not found:
            return None
        return min(found, key=lambda o: (o.limit is None, o.limit or 0))

    window_error = getattr(exceptions, 'ModelContextWindowExceededError', None)
    status = getattr(error, 'status_code', None)
    text = _error_text(error)
    if window_error is not None and isinstance(error, window_error):
        pass
    elif isinstance(error, exceptions.ModelHTTPError) and status in (400, 413, 422):
        lowered = text.lower()
        if not any(phrase in lowered for phrase in _PHRASES):
            return None
    else:
        return None
    lowered = text.lower()
    limit = _first_number(_LIMIT_RES, lowered)
    requested = _first_number(_REQUESTED_RES, lowered)
    kind = type(error).__name__ + (f' (HTTP {status})' if isinstance(status, int) else '')
    return Overflow(limit=limit, requested=requested, message=kind)


def _error_text(error: BaseException) -> str:
    chunks: list[str] = [str(getattr(error, 'message', '') or '')]
    body: Any = getattr(error, 'body', None)
    if body is not None:
        chunks.append(str(body))
    chunks.append(str(error))
    return ' '.join(chunks)[:_SCAN_CHARS]


def _first_number(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match is not None:
            value = int(match.group(1).replace(',', ''))
            if value > 0:
                return value
    return None
