"""`isolate_boundaries`: a finished run shows its prompt and answer, and only a record of its tool trace.

Once a run has answered, the steps that led to the answer matter far less than the answer
itself: the next run needs to know what was done and found, not every byte every tool printed.
The current run is never touched (DESIGN.md invariant 6).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolReturnPart,
)

from pydantic_ai_context import _markers, _parts
from pydantic_ai_context._facts import call_summary, digest
from pydantic_ai_context._markers import OriginalsSink
from pydantic_ai_context.tokens import TokenCounter
from pydantic_ai_context.views import CompileContext, current_run, run_spans, starts_run

from ._base import LastCall, SyncPolicy, context_key, extend_or_compute
from ._frontier import nominal_part_tokens
from ._summary_block import ACK_KIND, KEPT_KIND
from ._summary_block import MARKER_KIND as SUMMARY_KIND

__all__ = ('IsolateBoundaries', 'IsolateMode', 'isolate_boundaries')

IsolateMode = Literal['keep', 'mask', 'digest', 'drop']

MARKER_KIND: Final = 'isolated'

DIGEST_HEADER: Final = (
    '[Record kept by context management, not a new instruction: the tool calls made while answering '
    'this request ({n} {calls}; their outputs are no longer shown), one line each with the call, its status '
    'and the facts of its result:'
)

MASK_TEMPLATE: Final = '[output omitted: this turn is finished; {digest}]'

_SUMMARY_BLOCK: Final = frozenset({SUMMARY_KIND, KEPT_KIND, ACK_KIND})

# Request parts a collapsed step may hold: tool results and retry feedback. A step with anything
# else (a user or system prompt, an instruction change, a part this package does not know) is kept.
_TRACE_REQUEST_KINDS: Final = frozenset({'tool-return', 'retry-prompt', 'retry-feedback'})


@dataclass(kw_only=True)
class IsolateBoundaries(SyncPolicy):
    """Collapse the tool trace of every finished run, keeping its user prompt and its final answer.

    A run is finished when a later run follows it (`views.run_spans`; the current run is the one
    with `context.run_id`, else the last). Its request with the user prompt (and system prompts)
    and its final text answer stay as they are; what lies between is handled by `mode`:

    - `'digest'` (default): the whole trace becomes one text record, one line per tool call
      (tool name, identifying arguments, status, exit code, paths and error lines of its result),
      placed as a `TextPart` at the start of the final answer: the assistant's own account of what
      it did, worded as a record so it does not read as a new instruction.
    - `'mask'`: calls stay; successful tool outputs become a placeholder with the same facts.
    - `'drop'`: the trace is removed; prompt and answer remain.
    - `'keep'`: nothing changes.

    Steps that carry more than tool machinery (pinned content, a user or system prompt, a
    framework part this package does not know) are kept whole in every mode. A run without a
    final text answer (interrupted, or ended by an output tool) keeps its trace: its pending state
    stays visible (invariant 5). A run whose final answer is pinned is masked rather than digested,
    so the pinned message stays verbatim. Collapsed answers carry a metadata marker, so compiling a
    view of the view changes nothing.

    Example:
        ```python
        from pydantic_ai.messages import (
            ModelRequest,
            ModelResponse,
            TextPart,
            ToolCallPart,
            ToolReturnPart,
            UserPromptPart,
        )

        from pydantic_ai_context.policies.isolate import isolate_boundaries

        log = [
            ModelRequest(parts=[UserPromptPart('Which Python files are there?')]),
            ModelResponse(parts=[ToolCallPart('execute_bash', {'command': 'ls'}, tool_call_id='c1')]),
            ModelRequest(parts=[ToolReturnPart('execute_bash', 'src/a.py\\nsrc/b.py', tool_call_id='c1')]),
            ModelResponse(parts=[TextPart('Two: a.py and b.py.')]),
            ModelRequest(parts=[UserPromptPart('Thanks. Now add a README.')]),
        ]
        view = isolate_boundaries()(log)
        assert len(view) == 3  # prompt, answer (with the record), the new prompt
        record = view[1].parts[0].content
        assert "execute_bash(command='ls') → ok" in record and 'src/a.py' in record
        assert view[1].parts[1].content == 'Two: a.py and b.py.'
        ```
    """

    name: str = 'isolate_boundaries'
    """The step's name in a profile's chain."""
    mode: IsolateMode = 'digest'
    """What a finished run's tool trace becomes: `'digest'`, `'mask'`, `'drop'` or `'keep'`."""
    _last: LastCall | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in ('keep', 'mask', 'digest', 'drop'):
            raise ValueError(f"mode must be 'keep', 'mask', 'digest' or 'drop', not {self.mode!r}")

    def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        if self.mode == 'keep' or not messages:
            return list(messages)
        # Only finished runs change, so while the new messages start no run the output for a
        # longer log is the previous output plus the new messages.
        return extend_or_compute(
            self,
            messages,
            context_key(context),
            context,
            lambda: self._apply(messages, context),
            accept=lambda last, tail: _continues_last_run(last.messages, tail),
        )

    def _apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        current = current_run(messages, run_id=context.run_id)
        if current is None:
            return list(messages)
        out: list[ModelMessage] = []
        position = 0
        runs = 0
        calls = 0
        for span in run_spans(messages):
            if span.start >= current.start:
                break
            collapsed = self._collapse(messages[span.start : span.end], context.counter, context.originals)
            if collapsed is None:
                continue
            out.extend(messages[position : span.start])
            out.extend(collapsed.messages)
            position = span.end
            runs += 1
            calls += collapsed.calls
        if runs == 0:
            return list(messages)
        out.extend(messages[position:])
        context.note(
            f'isolated {runs} finished run{"s" if runs != 1 else ""} '
            f'({self.mode}, {calls} tool call{"s" if calls != 1 else ""})',
            isolated_runs=runs,
            isolated_calls=calls,
            mode=self.mode,
        )
        return out

    def _collapse(
        self, run: Sequence[ModelMessage], counter: TokenCounter, originals: OriginalsSink | None
    ) -> _Collapsed | None:
        """The run with its trace collapsed, or None when it has nothing to collapse."""
        head_end = next((i for i, m in enumerate(run) if _parts.has_user_prompt(m)), None)
        answer = run[-1] if run else None
        if head_end is None or not _is_final_answer(answer) or len(run) - 1 <= head_end + 1:
            return None
        if any((_parts.marker(m) or {}).get('kind') in _SUMMARY_BLOCK for m in run):
            # A summary block of a compiled view (summary, acknowledgement, kept steps) is no run
            # of its own: what it kept stays, or a view of the view would differ from the view.
            return None
        assert isinstance(answer, ModelResponse)
        if (_parts.marker(answer) or {}).get('kind') == MARKER_KIND:
            return None
        trace = list(run[head_end + 1 : -1])
        mode = self.mode
        if mode == 'digest' and _parts.message_pinned(answer):
            mode = 'mask'
        kept, collapsed = _split_steps(trace)
        if mode == 'mask':
            masked, n = _mask(trace, kept, counter, originals)
            if n == 0:
                return None
            return _Collapsed([*run[: head_end + 1], *masked, answer], n)
        if not collapsed:
            return None
        n_calls = sum(len(_parts.tool_calls(m)) for step in collapsed for m in step)
        body = [m for step in kept for m in step]
        if mode == 'drop':
            return _Collapsed([*run[: head_end + 1], *body, answer], n_calls)
        span = [m for step in collapsed for m in step]
        ref = _markers.span_ref(span)
        _markers.keep_span(originals, ref, span)
        new_answer = dataclasses.replace(
            answer,
            parts=_insert_after_thinking(answer.parts, TextPart(_markers.with_ref(_digest_text(span), ref))),
            metadata=_parts.with_marker(
                answer.metadata, {'kind': MARKER_KIND, 'mode': 'digest', 'calls': n_calls, 'ref': ref}
            ),
        )
        return _Collapsed([*run[: head_end + 1], *body, new_answer], n_calls)


@dataclass
class _Collapsed:
    messages: list[ModelMessage]
    calls: int


def isolate_boundaries(**settings: Any) -> IsolateBoundaries:
    """Collapse finished runs to prompt + answer + trace record; see `IsolateBoundaries`.

    Example:
        ```python
        from pydantic_ai_context.policies.isolate import isolate_boundaries

        policy = isolate_boundaries(mode='drop')
        assert policy.name == 'isolate_boundaries' and policy.mode == 'drop'
        ```
    """
    return IsolateBoundaries(**settings)


def _continues_last_run(log: Sequence[ModelMessage], tail: Sequence[ModelMessage]) -> bool:
    """`tail` adds to the last run of `log` without starting another (so `run_spans` agrees)."""
    requests = [m for m in log if isinstance(m, ModelRequest)]
    if not requests:
        return False
    if all(getattr(m, 'run_id', None) for m in requests):
        current = next((m.run_id for m in reversed(log) if getattr(m, 'run_id', None)), None)
        for message in tail:
            rid = getattr(message, 'run_id', None)
            if isinstance(message, ModelRequest) and not rid:
                return False  # run ids would no longer mark every run
            if rid is not None and rid != current:
                return False
        return True
    return not any(starts_run(m) for m in tail)


def _is_final_answer(message: ModelMessage | None) -> bool:
    return (
        isinstance(message, ModelResponse)
        and _parts.final_text(message) is not None
        and not _parts.tool_calls(message)
    )


def _split_steps(trace: list[ModelMessage]) -> tuple[list[list[ModelMessage]], list[list[ModelMessage]]]:
    """Group the trace into steps (a response and the requests after it); split kept from collapsible.

    Steps are kept in their order; a kept step is whole, so no call loses its result.
    """
    steps: list[list[ModelMessage]] = []
    for message in trace:
        if isinstance(message, ModelResponse) or not steps:
            steps.append([message])
        else:
            steps[-1].append(message)
    kept = [s for s in steps if _must_keep(s)]
    collapsed = [s for s in steps if not _must_keep(s)]
    return kept, collapsed


def _must_keep(step: list[ModelMessage]) -> bool:
    for message in step:
        if _parts.message_pinned(message):
            return True
        if isinstance(message, ModelRequest) and any(
            getattr(p, 'part_kind', None) not in _TRACE_REQUEST_KINDS for p in message.parts
        ):
            return True
    # A step that does not start with a response (a malformed trace) is left for normalize.
    return not isinstance(step[0], ModelResponse)


def _mask(
    trace: list[ModelMessage],
    kept: list[list[ModelMessage]],
    counter: TokenCounter,
    originals: OriginalsSink | None,
) -> tuple[list[ModelMessage], int]:
    keep_ids = {id(m) for step in kept for m in step}
    calls = {c.tool_call_id: c for m in trace for c in _parts.tool_calls(m)}
    out: list[ModelMessage] = []
    n = 0
    for message in trace:
        if id(message) in keep_ids or not isinstance(message, ModelRequest):
            out.append(message)
            continue
        parts: list[Any] = []
        changed = False
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and _maskable(part):
                text = MASK_TEMPLATE.format(digest=digest(calls.get(part.tool_call_id), part))
                # The original size goes into the marker: the frontier reads sizes from markers, so
                # it lands in the same place on this view as on the log.
                record = {'kind': MARKER_KIND, 'mode': 'mask', 'tokens': nominal_part_tokens(part, counter)}
                part = _markers.mark_result(part, text, record, originals)
                changed = True
                n += 1
            parts.append(part)
        out.append(dataclasses.replace(message, parts=parts) if changed else message)
    return out, n


def _maskable(part: ToolReturnPart) -> bool:
    # Failed results stay: they are short, and they are what the answer was up against. Typed
    # subclasses (2.x tool-search returns) declare a content shape a placeholder would break.
    return (
        type(part) is ToolReturnPart
        and not _parts.is_failed_result(part)
        and not _parts.is_pinned(part)
        and _parts.marker(part) is None
        and not _markers.is_readback(part)
    )


def _digest_text(trace: list[ModelMessage]) -> str:
    lines: list[str] = []
    n = 0
    results: dict[str, Any] = {}
    for message in trace:
        for result in _parts.tool_results(message):
            results.setdefault(result.tool_call_id, result)
    for message in trace:
        for call in _parts.tool_calls(message):
            result = results.get(call.tool_call_id)
            if result is None:
                lines.append(f'- {call_summary(call)} → no result recorded')
            else:
                lines.append(f'- {digest(call, result)}')
            n += 1
        if isinstance(message, ModelRequest):
            for part in message.parts:
                # Retry feedback that answers no call (output validation) is worth one line too.
                if isinstance(part, RetryPromptPart) and part.tool_name is None:
                    lines.append('- (the answer was retried after validation feedback)')
    header = DIGEST_HEADER.format(n=n, calls='call' if n == 1 else 'calls')
    return '\n'.join([header, *lines]) + ']'


def _insert_after_thinking(parts: Sequence[Any], record: TextPart) -> list[Any]:
    # Providers expect reasoning first in an assistant turn; the record goes right before the answer.
    i = 0
    while i < len(parts) and isinstance(parts[i], ThinkingPart):
        i += 1
    return [*parts[:i], record, *parts[i:]]
