"""Safe cut points: where a history can be split without separating a tool call from its result."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage, ModelResponse

from .. import _parts, _scope
from ._pairing import check_messages


def safe_cut_points(messages: Sequence[ModelMessage]) -> list[int]:
    """Indices `i` where `messages[:i]` and `messages[i:]` can be separated without splitting a tool pair.

    A call and its result are matched by id (the nearest earlier response holding that id), so
    the answer is right for broken histories too. `0` and `len(messages)` are always included.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart

        from pydantic_ai_context import safe_cut_points

        history = [
            ModelRequest(parts=[UserPromptPart('hi')]),
            ModelResponse(parts=[ToolCallPart('ls', {}, tool_call_id='a')]),
            ModelRequest(parts=[ToolReturnPart('ls', 'x.py', tool_call_id='a')]),
            ModelResponse(parts=[TextPart('done')]),
        ]
        assert safe_cut_points(history) == [0, 1, 3, 4]
        ```
    """
    check_messages(messages)
    # During a compile the cut points of the previous list are resumed from its first changed message.
    return _scope.resumed_fold('integrity.cuts', messages, _Cuts, _Cuts.points)


class _Cuts:
    """`safe_cut_points` as a fold: position `i` is unsafe when a result at `j >= i` answers a call
    at `k < i`. Per message `j` it keeps `lo[j]`, the lowest position its results make unsafe (`j + 1`:
    none), so `i` is safe exactly when every `lo[j]` with `j >= i` is above `i`."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.lo: list[int] = []
        self.calls_at: dict[str, int] = {}
        """The response holding each call id last (the nearest earlier one, for a result)."""
        self.undo: list[Sequence[tuple[str, int | None]]] = []
        """Per message: what it changed in `calls_at`, to undo when it is cut off (one shared empty
        tuple for a request: an object fewer per message for a full collection to walk)."""
        self.safe: list[int] = []
        """Safe positions below `len(messages)` (that length is always safe)."""
        self._rescan = 0
        """Where the safe positions must be found again from."""

    def truncate(self, n: int) -> None:
        low = min(self.lo[n:], default=n)
        for j in range(len(self.messages) - 1, n - 1, -1):
            for call_id, before in reversed(self.undo[j]):
                if before is None:
                    self.calls_at.pop(call_id, None)
                else:
                    self.calls_at[call_id] = before
        del self.messages[n:], self.lo[n:], self.undo[n:]
        # Positions from `low` on may have been unsafe only because of what was cut off.
        self._cut_safe(min(low, n))

    def _cut_safe(self, start: int) -> None:
        self._rescan = min(self._rescan, start)

    def extend(self, messages: Sequence[ModelMessage]) -> None:
        start = len(self.messages)
        low = start
        for j in range(start, len(messages)):
            message = messages[j]
            lo = j + 1
            changes: list[tuple[str, int | None]] = []
            if isinstance(message, ModelResponse):
                for call in _parts.tool_calls(message):
                    changes.append((call.tool_call_id, self.calls_at.get(call.tool_call_id)))
                    self.calls_at[call.tool_call_id] = j
            else:
                for result in _parts.tool_results(message):
                    k = self.calls_at.get(result.tool_call_id)
                    if k is not None and k + 1 < lo:
                        lo = k + 1
            self.messages.append(message)
            self.lo.append(lo)
            self.undo.append(changes or ())
            low = min(low, lo)
        if low < start:
            self._cut_safe(low)
        rescan = min(self._rescan, start)
        # Safe positions from `rescan` on: scanned right to left with the lowest `lo` seen so far.
        found: list[int] = []
        lowest = len(self.messages) + 1
        for i in range(len(self.messages) - 1, rescan - 1, -1):
            if self.lo[i] < lowest:
                lowest = self.lo[i]
            if lowest > i:
                found.append(i)
        found.reverse()
        del self.safe[bisect.bisect_left(self.safe, rescan) :]
        self.safe.extend(found)
        self._rescan = len(self.messages)

    def points(self) -> list[int]:
        return [*self.safe, len(self.messages)]
