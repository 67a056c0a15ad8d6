"""Execution facts of a recorded log (file paths and error lines of tool output), and which views keep them.

See the package docstring (`pydantic_ai_context.replay`) for the definitions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolReturnPart,
)

from .. import _facts, _parts

PATH_PATTERN = re.compile(r'(?:[\w.-]+/)+[\w.-]+\.[A-Za-z]\w{0,5}')
"""A file path with at least one directory and an extension (issue 3's definition).

The definition, not the search: `paths_in` finds exactly its matches in linear time. Searching a text
with it directly rescans a long run of word characters from every start position (quadratic)."""
ERROR_PATTERN = re.compile(r'Error|Exception|FAILED|Traceback|error:|FAIL:')
"""A line reporting an error (issue 3's definition)."""
_ERROR_LINE_CHARS = 120
_ERROR_LINE_MIN = 8


def paths_in(text: str) -> list[str]:
    """File paths in `text`, by `PATH_PATTERN`, in order of appearance (duplicates kept).

    The whole text is searched, in linear time, by `pydantic_ai_context._facts.paths_in` (which keeps
    an absolute path's leading slash; the pattern leaves it out). The paths are those of
    `PATH_PATTERN.findall(text)`, except inside a run of path characters longer than 4,096 or with a
    component longer than 255 (a dump or a blob, not a path).
    """
    return [path[1:] if path.startswith('/') else path for path in _facts.paths_in(text)]


def error_lines(text: str) -> list[str]:
    """Error lines in `text`: lines matching `ERROR_PATTERN`, stripped, first 120 chars, longer than 8."""
    out: list[str] = []
    for line in text.splitlines():
        if ERROR_PATTERN.search(line):
            fact = line.strip()[:_ERROR_LINE_CHARS]
            if len(fact) > _ERROR_LINE_MIN:
                out.append(fact)
    return out


def _tool_return_text(message: ModelMessage) -> str:
    if not isinstance(message, ModelRequest):
        return ''
    texts = [_parts.tool_content_text(p.content) for p in message.parts if isinstance(p, ToolReturnPart)]
    return '\n'.join(t for t in texts if t)


def _agent_text(message: ModelResponse) -> str:
    """What the agent wrote itself: tool call arguments and text (not thinking)."""
    chunks: list[str] = []
    for part in message.parts:
        if _parts.is_tool_call(part):
            chunks.append(_parts.args_text(part))
        elif isinstance(part, TextPart):
            chunks.append(part.content)
    return '\n'.join(chunks)


@dataclass(kw_only=True, eq=False)
class FactIndex:
    """The execution facts of one log, ordered by first appearance, and which views keep them.

    Profile-independent: build it once per log (`FactIndex.build`) and pass it to every `replay`
    of that log; the per-text search results it caches are shared too.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
        from pydantic_ai.messages import UserPromptPart

        from pydantic_ai_context.replay import FactIndex

        output = 'src/app.py\\nValueError: bad input'
        log = [
            ModelRequest(parts=[UserPromptPart('fix it')]),
            ModelResponse(parts=[ToolCallPart('bash', {'command': 'ls'}, tool_call_id='1')]),
            ModelRequest(parts=[ToolReturnPart('bash', output, tool_call_id='1')]),
            ModelResponse(parts=[ToolCallPart('bash', {'command': 'cat src/app.py'}, tool_call_id='2')]),
        ]
        facts = FactIndex.build(log)
        assert facts.facts == ['src/app.py', 'ValueError: bad input']
        assert facts.retention(3, log[:3]) == (1.0, 1.0)
        ```
    """

    facts: list[str]
    """Every fact of the log, in order of first appearance."""
    first_seen: list[int]
    """For each fact, the index of the first message whose tool returns contain it."""
    is_path: list[bool]
    last_use: list[int]
    """For each path fact, the index of the last response that uses it (-1: never)."""
    sources: list[frozenset[int]]
    """For each fact, the ids of the log's messages whose tool returns contain it."""
    source_calls: list[tuple[str, ...]] = field(default_factory=list[tuple[str, ...]])
    """For each fact, the `tool_call_id`s of the tool returns that contain it, in log order."""
    _log: Sequence[ModelMessage] = ()
    _found: dict[str, frozenset[int]] = field(default_factory=dict[str, frozenset[int]], repr=False)
    _texts: dict[int, tuple[ModelMessage, str]] = field(default_factory=dict[int, tuple[ModelMessage, str]])

    @classmethod
    def build(cls, messages: Sequence[ModelMessage]) -> FactIndex:
        """Extract the facts of `messages` (one pass over the tool returns and one over the responses)."""
        index: dict[str, int] = {}
        facts: list[str] = []
        first_seen: list[int] = []
        is_path: list[bool] = []
        sources: list[set[int]] = []
        calls: list[dict[str, None]] = []
        for i, message in enumerate(messages):
            if not isinstance(message, ModelRequest):
                continue
            for part in message.parts:
                if not isinstance(part, ToolReturnPart):
                    continue
                text = _parts.tool_content_text(part.content)
                for fact, path in [
                    *((p, True) for p in paths_in(text)),
                    *((e, False) for e in error_lines(text)),
                ]:
                    k = index.get(fact)
                    if k is None:
                        k = index[fact] = len(facts)
                        facts.append(fact)
                        first_seen.append(i)
                        is_path.append(path)
                        sources.append(set())
                        calls.append({})
                    # A string can be both a path and inside an error line; as a path it may be needed.
                    is_path[k] = is_path[k] or path
                    sources[k].add(id(message))
                    calls[k][part.tool_call_id] = None
        last_use = [-1] * len(facts)
        path_ids = [k for k in range(len(facts)) if is_path[k]]
        pending = set(path_ids)
        # Walk responses newest first: the first hit for a path is its last use.
        for i in range(len(messages) - 1, -1, -1):
            message = messages[i]
            if not pending:
                break
            if not isinstance(message, ModelResponse):
                continue
            text = _agent_text(message)
            if not text:
                continue
            hits = [k for k in pending if facts[k] in text]
            for k in hits:
                last_use[k] = i
            pending.difference_update(hits)
        return cls(
            facts=facts,
            first_seen=first_seen,
            is_path=is_path,
            last_use=last_use,
            sources=[frozenset(s) for s in sources],
            source_calls=[tuple(c) for c in calls],
            _log=messages,
        )

    def known_before(self, index: int) -> list[int]:
        """Fact ids seen in tool returns before message `index`."""
        return [k for k, seen in enumerate(self.first_seen) if seen < index]

    def needed_before(self, index: int) -> list[int]:
        """Path fact ids seen before message `index` that a response at or after `index` uses."""
        return [k for k, seen in enumerate(self.first_seen) if seen < index and self.last_use[k] >= index]

    def used_at(self, index: int) -> list[int]:
        """Fact ids seen before message `index` that the response at `index` uses (its call arguments or text)."""
        message = self._log[index] if index < len(self._log) else None
        if not isinstance(message, ModelResponse):
            return []
        text = _agent_text(message)
        return [k for k in self.known_before(index) if self.facts[k] in text] if text else []

    def present(self, view: Sequence[ModelMessage]) -> set[int]:
        """Fact ids the view's text shows."""
        return self._present(view)

    def retention(self, index: int, view: Sequence[ModelMessage]) -> tuple[float, float]:
        """(fact retention, needed-fact retention) of `view` for the request answered by message `index`.

        With no facts (or no needed facts) the share is 1.0: nothing could have been lost.
        """
        known = self.known_before(index)
        needed = [k for k in known if self.last_use[k] >= index]
        if not known:
            return 1.0, 1.0
        present = self._present(view)
        kept = sum(1 for k in known if k in present)
        kept_needed = sum(1 for k in needed if k in present)
        return kept / len(known), (kept_needed / len(needed) if needed else 1.0)

    def _present(self, view: Sequence[ModelMessage]) -> set[int]:
        # Facts hold no newline, so a fact is in the joined view text iff it is in one message's text.
        ids = {id(m) for m in view}
        present = {k for k, src in enumerate(self.sources) if not ids.isdisjoint(src)}
        for message in view:
            present.update(self._found_in(self._text(message)))
        return present

    def _text(self, message: ModelMessage) -> str:
        # Keyed by identity (the message is kept alive alongside): unchanged messages are the same
        # objects request after request, so their text is built once.
        cached = self._texts.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1]
        text = _parts.message_text(message)
        self._texts[id(message)] = (message, text)
        return text

    def _found_in(self, text: str) -> frozenset[int]:
        # Keyed by text: policies may rebuild an equal placeholder on every compile.
        found = self._found.get(text)
        if found is None:
            found = self._found[text] = frozenset(k for k, fact in enumerate(self.facts) if fact in text)
        return found
