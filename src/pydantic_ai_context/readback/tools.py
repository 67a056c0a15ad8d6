"""Read back what a view left out: `read_context`, `search_context`, the toolset and the instruction.

Every marker a policy writes names a ref (`[original: read_context('<ref>')]`): a tool result by
its `tool_call_id`, a span of messages (a dropped span, a summarised middle, a finished run's
trace) by a short stable id. The tools find the original:

- a tool result in the canonical log the tool sees (`ctx.messages`: the whole log on pydantic-ai
  2.x with the profile as a capability), else in the side store;
- a span in the side store (its messages as the view held them; their tool results are read
  back from the log or the store again, so a span reads back whole).

The side store (`archive.ContextArchive`) holds what the log the tools read cannot give.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import (
    InstructionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import FunctionToolset

from .. import _native_tools, _parts
from .._boundaries import is_tool_content
from .._markers import READ_CONTEXT, SEARCH_CONTEXT, has_ref, is_readback, ref_of
from .._memo import ObjectMemo
from ..integrity import unique_call_ids
from . import _search
from .archive import ContextArchive

__all__ = (
    'READBACK_INSTRUCTION',
    'READ_CONTEXT',
    'SEARCH_CONTEXT',
    'read_context',
    'readback_toolset',
    'search_context',
    'shows_markers',
    'with_readback_instruction',
)

logger = logging.getLogger('pydantic_ai_context.readback')

READBACK_INSTRUCTION: Final = (
    'Some earlier tool outputs and messages of this conversation are shortened or left out to save '
    "context; each such marker ends with [original: read_context('<ref>')]. Call read_context(ref) to "
    'read an original (paged by lines: offset, limit) and search_context(query) to find refs by '
    'content. Read back only what you need.'
)
"""The one instruction the profile adds, word for word the same in every request it appears in."""

PAGE_LINES: Final = 200
"""Lines `read_context` returns by default."""
PAGE_CHARS: Final = 20_000
"""Characters one page holds at most (a page stops early, and a longer line is cut)."""
SEARCH_HITS: Final = 5
MAX_SEARCH_HITS: Final = 20

ECHO_CHARS: Final = 200
"""Characters of a ref or query a tool's answer repeats back at most."""


def _echo(text: str) -> str:
    """`text` as an answer repeats it: quoted, clipped to `ECHO_CHARS` (a 1 MB argument is not echoed whole)."""
    if len(text) <= ECHO_CHARS:
        return repr(text)
    return f'{text[:ECHO_CHARS]!r}... ({len(text):,} characters)'


@dataclass(frozen=True)
class _Side:
    """The side store as one conversation's reader sees it: `conversation` None reads nothing."""

    archive: ContextArchive
    conversation: str | None

    def result(self, ref: str) -> tuple[str, str] | None:
        return self.archive.result(ref, conversation=self.conversation)

    def span(self, ref: str) -> list[ModelMessage | str] | None:
        return self.archive.span(ref, conversation=self.conversation)

    def span_refs(self) -> list[str]:
        return self.archive.span_refs(self.conversation)


def _side(
    archive: ContextArchive | None, log: Sequence[ModelMessage], run_context: Any, conversation: str | None
) -> _Side | None:
    if archive is None:
        return None
    return _Side(archive, archive.conversation_of(log, run_context=run_context, conversation=conversation))


# --- resolving a ref ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Original:
    what: str
    """How the header describes it: `read_file result`, `span of 12 messages`."""
    text: str


def _results(message: ModelMessage) -> list[Any]:
    """The tool results a message holds: a request's, or the native ones of a response."""
    return _parts.tool_results(message) or _native_tools.native_returns(message)


def _find_result(ref: str, log: Sequence[ModelMessage]) -> Any:
    for message in reversed(log):
        for part in _results(message):
            if part.tool_call_id == ref:
                return part
    return None


def _tool_content(ref: str, log: Sequence[ModelMessage]) -> str:
    """What the tools of result `ref`'s request returned beside their results (`ToolReturn` content),
    as lines after the result's text ('' when there is none)."""
    for message in reversed(log):
        if any(p.tool_call_id == ref for p in _parts.tool_results(message)):
            parts: list[Any] = [p for p in message.parts if is_tool_content(p, message)]
            return ''.join(
                f'\n[returned beside the results of this step: {_parts.user_content_text(p.content)}'
                f'{_files(p.content)}]'
                for p in parts
            )
    return ''


def _files(content: Any) -> str:
    n = sum(1 for item in _parts.content_items(content) if _parts.is_binary_item(item))
    return f' (+{n} file{"s" if n != 1 else ""})' if n else ''


def _result_text(ref: str, log: Sequence[ModelMessage], archive: _Side | None) -> tuple[str, str] | None:
    """(tool name, original text) of tool result `ref`: the log's copy unless it is a marker, else the store's."""
    part = _find_result(ref, log)
    if part is not None and _parts.marker(part) is None:
        if _native_tools.is_native_return(part):
            return part.tool_name or '', _native_tools.result_text(part)
        return part.tool_name or '', _parts.part_text(part) + _tool_content(ref, log)
    kept = archive.result(ref) if archive is not None else None
    if kept is not None:
        return kept
    return None


def _resolve(ref: str, log: Sequence[ModelMessage], archive: _Side | None) -> _Original:
    part = _find_result(ref, log)
    if part is not None and is_readback(part):
        raise ModelRetry(
            f'{_echo(ref)} is the result of a {part.tool_name} call, not an original: '
            'read the ref that call was given instead.'
        )
    found = _result_text(ref, log, archive)
    if found is not None:
        return _Original(f'{found[0] or "tool"} result', found[1])
    items = archive.span(ref) if archive is not None else None
    if items is not None:
        rendered = list(_render_span(items, log, archive, ref))
        lines = [line for _, chunk in rendered for line in chunk]
        # Nested spans (a drop note lists the steps it dropped) count their own messages.
        n = sum(1 for message, _ in rendered if message is not None)
        return _Original(f'span of {n} message{"s" if n != 1 else ""}', '\n'.join(lines))
    if archive is not None and archive.conversation is None:
        raise ModelRetry(
            f'the original of {_echo(ref)} cannot be read back: this conversation cannot be told apart '
            'from another one that starts the same way, so no stored original is shared with it.'
        )
    if part is not None:
        raise ModelRetry(
            f'the original of {_echo(ref)} is no longer available; its marker is all that is left.'
        )
    raise ModelRetry(
        f'unknown ref {_echo(ref)}: use a ref named in a marker ([original: read_context(...)]) '
        'or found by search_context.'
    )


def _render_span(
    items: Sequence[ModelMessage | str],
    log: Sequence[ModelMessage],
    archive: _Side | None,
    ref: str,
) -> Iterator[tuple[ModelMessage | None, list[str]]]:
    """Each message of span `ref` (its `items`) as text lines (nested spans expanded), with the message it came from.

    Expanded with a stack, not recursion: a summary of a long growing log names the previous
    summary's span, which names the one before, one level per summary. A span named twice (only
    in a store written by hand) is shown once."""
    stack: list[Iterator[ModelMessage | str]] = [iter(items)]
    seen = {ref}
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            continue
        if isinstance(item, str):
            if item in seen:
                yield None, [f'(earlier span {item}: shown above)']
                continue
            seen.add(item)
            nested = archive.span(item) if archive is not None else None
            if nested is None:
                yield None, [f'(earlier span {item}: no longer available)']
            else:
                stack.append(iter(nested))
            continue
        yield item, list(_message_lines(item, log, archive))


def _message_lines(
    message: ModelMessage, log: Sequence[ModelMessage], archive: _Side | None
) -> Iterator[str]:
    part: Any
    for part in message.parts:
        if isinstance(part, SystemPromptPart):
            yield f'system: {part.content}'
        elif isinstance(part, UserPromptPart):
            if is_tool_content(part, message):
                yield f'tool content: {_parts.user_content_text(part.content)}{_files(part.content)}'
            else:
                yield f'user: {_parts.user_content_text(part.content)}'
        elif _parts.is_tool_result(part):
            yield from _result_lines(part, log, archive)
        elif _parts.is_tool_call(part):
            yield f'assistant called {part.tool_name} [{part.tool_call_id}]: {_parts.args_text(part)}'
        elif isinstance(part, TextPart):
            yield f'assistant: {part.content}'
        elif getattr(part, 'part_kind', '') == 'thinking':
            continue
        else:
            text = _parts.part_text(part)
            if text:
                role = 'assistant' if isinstance(message, ModelResponse) else 'context'
                yield f'{role}: {text}'


def _result_lines(part: Any, log: Sequence[ModelMessage], archive: _Side | None) -> Iterator[str]:
    head = f'tool result {part.tool_name} [{part.tool_call_id}]'
    if is_readback(part):
        # Never recursive: a read-back's page is a copy of an original that has its own ref.
        yield f'{head}: (a read-back result; not repeated)'
        return
    found = _result_text(part.tool_call_id, log, archive)
    text = found[1] if found is not None else _parts.part_text(part)
    status = ' (failed)' if _parts.is_failed_result(part) else ''
    yield f'{head}{status}: {text}'


def _page(ref: str, original: _Original, offset: int, limit: int) -> str:
    lines = original.text.split('\n')
    total = len(lines)
    if not original.text.strip():
        raise ModelRetry(f'the original of {_echo(ref)} is empty.')
    if offset < 0 or limit < 1:
        raise ModelRetry('offset must be >= 0 and limit >= 1.')
    if offset >= total:
        raise ModelRetry(f'{_echo(ref)} has {total:,} lines; offset {offset:,} is past its end.')
    page: list[str] = []
    chars = 0
    for line in lines[offset : offset + limit]:
        if len(line) > PAGE_CHARS:
            line = f'{line[:PAGE_CHARS]} [... line cut at {PAGE_CHARS:,} of {len(line):,} characters]'
        if page and chars + len(line) > PAGE_CHARS:
            break
        page.append(line)
        chars += len(line) + 1
    end = offset + len(page)
    header = f'[{ref}: {original.what}, lines {offset + 1:,}-{end:,} of {total:,}'
    if end < total:
        header += f"; next page: read_context('{ref}', offset={end})"
    return header + ']\n' + '\n'.join(page)


def read_context(
    ref: str,
    log: Sequence[ModelMessage],
    archive: ContextArchive | None = None,
    *,
    offset: int = 0,
    limit: int = PAGE_LINES,
    conversation: str | None = None,
    run_context: Any = None,
) -> str:
    """The original behind `ref`, lines `offset` to `offset + limit`, under a header with the total.

    A tool result comes from `log` (unless the log holds only its marker), else from `archive`;
    a span from `archive`: only the originals of the conversation `log` belongs to (named by
    `conversation`, as the compile was, else by the ids of `log` or of `run_context`'s run, else
    by lineage; see `ContextArchive`). An unknown ref, an empty original or an offset past the end
    raises `ModelRetry`; the `read_context` tool turns it into a failed tool result the model sees
    (pydantic-ai 2.x `ToolFailed`, an `Error:` result on 1.x). The ref is repeated back clipped.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ToolReturnPart

        from pydantic_ai_context.readback import read_context

        log = [ModelRequest(parts=[ToolReturnPart('read_file', 'alpha\\nbeta\\ngamma', tool_call_id='c1')])]
        page = read_context('c1', log, offset=1, limit=1)
        assert page == "[c1: read_file result, lines 2-2 of 3; next page: read_context('c1', offset=2)]\\nbeta"
        ```
    """
    ref = ref.strip()
    if not ref:
        raise ModelRetry("give the ref a marker names, e.g. read_context('call_abc').")
    # Markers name tool results as the view does: a reused or unreadable call id renamed (`<id>-<n>`).
    log = unique_call_ids(log)
    return _page(ref, _resolve(ref, log, _side(archive, log, run_context, conversation)), offset, limit)


# --- searching ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Document:
    ref: str
    what: str
    text: str
    line: int | None = None
    """For a message of a span: its first line in `read_context(ref)`."""


def _documents(log: Sequence[ModelMessage], archive: _Side | None) -> list[_Document]:
    docs: list[_Document] = []
    seen: set[str] = set()

    def add_result(part: Any) -> None:
        ref = part.tool_call_id
        if ref in seen or is_readback(part):
            return
        seen.add(ref)
        found = _result_text(ref, log, archive)
        text = found[1] if found is not None else _parts.part_text(part)
        docs.append(_Document(ref, f'{part.tool_name} result', text))

    span_refs: dict[str, None] = {}
    for message in log:
        for part in _results(message):
            add_result(part)
        ref = ref_of(message)
        if ref is not None:
            span_refs[ref] = None
    if archive is None:
        return docs
    span_refs.update(dict.fromkeys(archive.span_refs()))
    for ref in span_refs:
        items = archive.span(ref)
        if items is None:
            continue
        at = 0
        for held, chunk in _render_span(items, log, archive, ref):
            if held is not None:
                for part in _results(held):
                    add_result(part)
                text = '\n'.join(_message_lines_without_results(held, log, archive))
                if text:
                    role = 'assistant' if isinstance(held, ModelResponse) else 'user'
                    docs.append(_Document(ref, f'{role} message of a span', text, at))
            at += sum(text_line.count('\n') + 1 for text_line in chunk)
    return docs


def _message_lines_without_results(
    message: ModelMessage, log: Sequence[ModelMessage], archive: _Side | None
) -> Iterator[str]:
    # A span's tool results are searched under their own refs.
    if isinstance(message, ModelRequest):
        message = _parts.replace_parts(message, [p for p in message.parts if not _parts.is_tool_result(p)])
    return _message_lines(message, log, archive)


def search_context(
    query: str,
    log: Sequence[ModelMessage],
    archive: ContextArchive | None = None,
    *,
    limit: int = SEARCH_HITS,
    conversation: str | None = None,
    run_context: Any = None,
) -> str:
    """Rank the tool results and left-out messages of the conversation against `query` (BM25); list
    the best `limit` as refs with a snippet, best first. Nothing found raises `ModelRetry`.

    Only the conversation `log` belongs to is searched (`conversation` and `run_context` as for
    `read_context`). The query is repeated back clipped.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ToolReturnPart

        from pydantic_ai_context.readback import search_context

        log = [
            ModelRequest(parts=[ToolReturnPart('read_file', 'def parse(): ...', tool_call_id='c1')]),
            ModelRequest(parts=[ToolReturnPart('read_file', 'ValueError: bad header', tool_call_id='c2')]),
        ]
        assert search_context('bad header', log).splitlines()[1].startswith('- c2 (read_file result)')
        ```
    """
    limit = max(1, min(limit, MAX_SEARCH_HITS))
    if not _search.query_terms(query):
        raise ModelRetry('the query has no words to search for.')
    log = unique_call_ids(log)
    docs = _documents(log, _side(archive, log, run_context, conversation))
    hits: list[str] = []
    shown: set[tuple[str, str]] = set()
    for index, snippet in _search.rank([d.text for d in docs], query, limit * 3):
        doc = docs[index]
        if (doc.ref, snippet) in shown:
            continue
        shown.add((doc.ref, snippet))
        where = f', line {doc.line + 1:,}' if doc.line is not None else ''
        hits.append(f'- {doc.ref} ({doc.what}{where}): {snippet}')
        if len(hits) == limit:
            break
    if not hits:
        raise ModelRetry(f'nothing earlier in this conversation matches {_echo(query)}; try other words.')
    return f'{len(hits)} match{"es" if len(hits) != 1 else ""} for {_echo(query)}, best first:\n' + '\n'.join(
        hits
    )


# --- the tools and the instruction ------------------------------------------------------------------


_SHOWS: ObjectMemo[bool] = ObjectMemo(max_bytes=4 * 1024 * 1024)
"""Whether a message shows a marker, while it lives unchanged (weakly held)."""


def shows_markers(messages: Sequence[ModelMessage]) -> bool:
    """Whether any message of `messages` is, or holds, a marker naming a ref."""
    for message in messages:
        found = _SHOWS.get(message)
        if found is None:
            found = _SHOWS.put(message, has_ref(message), size=1)
        if found:
            return True
    return False


def with_readback_instruction(parts: list[InstructionPart] | None) -> list[InstructionPart]:
    """`parts` with `READBACK_INSTRUCTION` after the static parts (once): the cached static prefix
    then holds it from the first request that carries it on."""
    out = list(parts or [])
    if any(p.content == READBACK_INSTRUCTION for p in out):
        return out
    at = next((i for i, p in enumerate(out) if p.dynamic), len(out))
    return [*out[:at], InstructionPart(READBACK_INSTRUCTION), *out[at:]]


try:  # pydantic-ai 2.x: a failed tool result that spends no retry budget
    from pydantic_ai.exceptions import ToolFailed as _ToolFailed
except ImportError:  # pragma: no cover - pydantic-ai 1.x
    _ToolFailed = None  # type: ignore[assignment,misc]


async def _answer(compute: Callable[[], str]) -> str:
    """A bad ref or an empty search, as a failed tool result the model sees and can act on.

    `ToolFailed` (pydantic-ai 2.x) does not spend the tool's retry budget: a model that keeps
    asking for refs that do not exist is told so each time and the run goes on (a `ModelRetry`
    would end the run with `UnexpectedModelBehavior` once the retries ran out). pydantic-ai 1.x
    has no `ToolFailed`: the message comes back as the tool's result, starting with `Error:`.
    """
    try:
        return compute()
    except ModelRetry as exc:
        if _ToolFailed is not None:
            raise _ToolFailed(exc.message) from None
        return f'Error: {exc.message}'


def readback_toolset(
    archive: ContextArchive | None = None, *, instructions: bool = True
) -> FunctionToolset[Any]:
    """A toolset with `read_context` and `search_context`, reading the run's history and `archive`.

    With `instructions`, the toolset also gives `READBACK_INSTRUCTION` to every request whose
    history holds a marker (pydantic-ai resolves a toolset's instructions before the history
    processors run, so on pydantic-ai 1.x it appears from the request after the first one that
    compacted). A profile's capability adds the instruction itself and uses `instructions=False`.

    Example:
        ```python
        from pydantic_ai import Agent
        from pydantic_ai.models.test import TestModel

        from pydantic_ai_context.readback import readback_toolset

        agent = Agent(TestModel(call_tools=[]), toolsets=[readback_toolset()])
        assert agent.run_sync('hi').output
        ```
    """

    async def read_context_tool(
        ctx: RunContext[Any], ref: str, offset: int = 0, limit: int = PAGE_LINES
    ) -> str:
        """Read back the original of a shortened or left-out part of this conversation.

        Args:
            ref: The ref a marker names (`[original: read_context('<ref>')]`) or search_context found.
            offset: The first line to return (0-based); a page's header says where the next one starts.
            limit: How many lines to return.
        """
        return await _answer(
            lambda: read_context(ref, ctx.messages, archive, offset=offset, limit=limit, run_context=ctx)
        )

    async def search_context_tool(ctx: RunContext[Any], query: str, limit: int = SEARCH_HITS) -> str:
        """Search the earlier tool outputs and left-out messages of this conversation; returns refs with snippets.

        Args:
            query: Words to look for (paths, names, error text).
            limit: How many matches to return, best first.
        """
        return await _answer(
            lambda: search_context(query, ctx.messages, archive, limit=limit, run_context=ctx)
        )

    def instruction(ctx: RunContext[Any]) -> str | None:
        return READBACK_INSTRUCTION if shows_markers(ctx.messages) else None

    toolset: FunctionToolset[Any] = FunctionToolset(
        max_retries=3, instructions=[instruction] if instructions else None
    )
    toolset.add_function(read_context_tool, name=READ_CONTEXT)
    toolset.add_function(search_context_tool, name=SEARCH_CONTEXT)
    return toolset
