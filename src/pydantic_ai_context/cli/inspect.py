"""`pydantic-ai-context inspect`: one request's log and compiled view side by side, what each policy
did, the text the model sees in place of what was compacted, and the context gauge."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import _parts
from ..events import CompactionEvent, ContextEvent, ContextUsageEvent
from ..request_tokens import weigh_request
from ..settings import default_profile_name
from ..tokens import TokenCounter, message_tokens
from ._common import (
    EXIT_OK,
    UsageError,
    Window,
    add_common_options,
    build,
    check_profile,
    counter_for,
    emit,
    load,
    resolve_window,
)

DEFAULT_PROFILE: Final = 'coding'
"""The profile `inspect` shows without `--profile` or `PYDANTIC_AI_CONTEXT_PROFILE`: the one the docs lead with."""
TEXT_CHARS: Final = 400
"""Characters of a replacement text shown (a summary can be long); the rest is counted."""


def add_parser(commands: Any) -> None:
    ins = commands.add_parser(
        'inspect',
        help="show one request's log and compiled view side by side",
        description='Show the log and the compiled view side by side for one request: each message '
        'with its role, kind and tokens, what each policy did, the text that replaced compacted '
        'content (digests, trims, summaries), and the context gauge.',
    )
    ins.add_argument('file', type=Path, metavar='FILE', help='a pydantic-ai JSON history file')
    ins.add_argument(
        '--profile',
        '-p',
        metavar='NAME',
        help=f'the profile (default: PYDANTIC_AI_CONTEXT_PROFILE, else {DEFAULT_PROFILE})',
    )
    ins.add_argument(
        '--at',
        type=int,
        metavar='N',
        help='the request to show: 1 for the first, -1 (default) for the last recorded request',
    )
    ins.add_argument(
        '--history',
        type=int,
        default=0,
        metavar='K',
        help='which history of a file holding a list of histories: 0 (the default) for the first',
    )
    add_common_options(ins)
    ins.set_defaults(handler=run)


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    name = args.profile or default_profile_name(DEFAULT_PROFILE)
    check_profile(name, allow_none=False)
    window = resolve_window(args)
    counter = counter_for(args)
    histories = load([args.file], need_responses=False)
    if not 0 <= args.history < len(histories):
        count = len(histories)
        held = '1 history (--history 0)' if count == 1 else f'{count} histories (--history 0 to {count - 1})'
        raise UsageError(f'--history {args.history}: {args.file} holds {held}')
    log = histories[args.history].messages
    responses = [i for i, m in enumerate(log) if isinstance(m, ModelResponse)]
    if responses:
        at = -1 if args.at is None else args.at
        number = at if at > 0 else len(responses) + 1 + at
        if not 1 <= number <= len(responses) or at == 0:
            raise UsageError(
                f'--at {args.at}: {args.file} has requests 1..{len(responses)} (or -1 for the last)'
            )
        log_input = log[: responses[number - 1]]
        title = f'request {number} of {len(responses)}'
    else:
        if args.at not in (None, 1, -1):
            raise UsageError(f'--at {args.at}: {args.file} has no recorded responses; only request 1 exists')
        log_input = list(log)
        title = 'request 1 of 1'
    events: list[ContextEvent] = []
    built = build(
        name, window=window.tokens, counter=counter, on_event=events.append, summary_model=args.summary_model
    )
    view = asyncio.run(built.compile(log_input))
    rows = align(log_input, view)
    emit(
        out,
        inspect_table(f'{args.file}: {title}, profile {name}', rows, log_input, view, counter),
        args.format,
    )
    replaced = replacements_table(rows, view)
    if replaced is not None:
        emit(out, replaced, args.format)
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    emit(out, events_table(compactions), args.format)
    usage = next((e for e in events if isinstance(e, ContextUsageEvent)), None)
    if usage is not None:
        out.print(gauge(usage, window))
    return EXIT_OK


@dataclass(frozen=True)
class AlignedRow:
    """One line of `inspect`: a log message, its counterpart in the view, and what became of it."""

    log_index: int | None
    view_index: int | None
    status: str
    """`kept`, `changed`, `dropped`, `summarised` or `inserted`."""


def align(log: Sequence[ModelMessage], view: Sequence[ModelMessage]) -> list[AlignedRow]:
    """Pair the messages of `view` with those of `log` they come from, in order.

    A view message is the log message itself (`kept`), a copy of it that a policy changed
    (`changed`: same kind of message sharing a part's tool call id or timestamp), or new
    (`inserted`: a summary, a note). Log messages with no counterpart were `summarised` when a
    summary was inserted in their place, else `dropped`.
    """
    position = {id(m): i for i, m in enumerate(log)}
    rows: list[AlignedRow] = []
    inserted: list[int] = []
    cursor = 0

    def flush(until: int) -> None:
        summarised = any(_marker_kind(view[j]) == 'summary' for j in inserted)
        rows.extend(
            AlignedRow(k, None, 'summarised' if summarised else 'dropped') for k in range(cursor, until)
        )
        rows.extend(AlignedRow(None, j, 'inserted') for j in inserted)
        inserted.clear()

    for j, message in enumerate(view):
        i = position.get(id(message))
        if i is None or i < cursor:
            i = _counterpart(message, log, cursor)
        if i is None:
            inserted.append(j)
            continue
        flush(i)
        rows.append(AlignedRow(i, j, 'kept' if log[i] is message else 'changed'))
        cursor = i + 1
    flush(len(log))
    return rows


def _signatures(message: ModelMessage) -> set[tuple[str, Any]]:
    found: set[tuple[str, Any]] = set()
    for part in message.parts:
        call_id = getattr(part, 'tool_call_id', None)
        if call_id:
            found.add(('call', call_id))
        stamp = getattr(part, 'timestamp', None)
        if stamp is not None:
            found.add(('time', stamp))
    stamp = getattr(message, 'timestamp', None)
    if stamp is not None:
        found.add(('message-time', stamp))
    return found


def _counterpart(message: ModelMessage, log: Sequence[ModelMessage], start: int) -> int | None:
    wanted = _signatures(message)
    if not wanted:
        return None
    for i in range(start, len(log)):
        if type(log[i]) is type(message) and not wanted.isdisjoint(_signatures(log[i])):
            return i
    return None


def _marker_kind(message: ModelMessage) -> str | None:
    record = _parts.marker(message)
    kind = record.get('kind') if record else None
    return str(kind) if kind is not None else None


# What a marker on a kept message says about it: a drop note merged into a request marks the
# request with `dropped`, but the request itself was kept (the note tells of the steps after it).
_CHANGE_LABELS: Final = {'dropped': 'drop note added'}


def _changes(message: ModelMessage) -> str:
    kinds: dict[str, int] = {}
    for obj in (message, *message.parts):
        record = _parts.marker(obj)
        if record and record.get('kind'):
            kinds[str(record['kind'])] = kinds.get(str(record['kind']), 0) + 1
    return ', '.join(f'{k}' + (f' x{n}' if n > 1 else '') for k, n in kinds.items())


def replacement_texts(message: ModelMessage) -> list[tuple[str, str]]:
    """(kind, text) for each part this package wrote or rewrote in `message`: the digest of a masked
    result, the head and tail of a trimmed one, a summary, a note on dropped messages..."""
    found: list[tuple[str, str]] = []
    for part in message.parts:
        record = _parts.marker(part)
        if record and record.get('kind'):
            found.append((str(record['kind']), _parts.part_text(part)))
    record = _parts.marker(message)
    kind = _marker_kind(message)
    if record is not None and kind is not None and not found:
        # A marker on a whole message: its note (a drop), or the calls of a response whose arguments
        # were clipped; never the request's instructions, which are no replacement.
        calls = [_parts.part_text(p) for p in message.parts if _parts.is_tool_call(p)]
        note = record.get('note')
        if isinstance(note, str) and note:
            text = note
        elif isinstance(message, ModelResponse) and calls:
            text = '\n'.join(calls)
        else:
            text = '\n'.join(t for t in (_parts.part_text(p) for p in message.parts) if t)
        found.append((kind, text))
    return found


def _role(message: ModelMessage) -> str:
    if isinstance(message, ModelResponse):
        return 'assistant'
    assert isinstance(message, ModelRequest)
    if _parts.tool_results(message):
        return 'tool'
    if _parts.has_user_prompt(message):
        return 'user'
    if _parts.has_system_prompt(message):
        return 'system'
    return 'request'


def _kind(message: ModelMessage) -> str:
    names: list[str] = []
    for part in message.parts:
        label = str(getattr(part, 'part_kind', type(part).__name__))
        tool = getattr(part, 'tool_name', None)
        names.append(f'{label}:{tool}' if tool else label)
    counted: dict[str, int] = {}
    for n in names:
        counted[n] = counted.get(n, 0) + 1
    return ', '.join(n + (f' x{c}' if c > 1 else '') for n, c in counted.items())


_STATUS_STYLE: Final = {
    'kept': 'dim',
    'changed': 'yellow',
    'dropped': 'red',
    'summarised': 'magenta',
    'inserted': 'green',
}


def inspect_table(
    title: str,
    rows: Sequence[AlignedRow],
    log: Sequence[ModelMessage],
    view: Sequence[ModelMessage],
    counter: TokenCounter,
) -> Table:
    log_weight = weigh_request(log, counter=counter)
    view_weight = weigh_request(view, counter=counter)
    table = Table(
        title=f'{title}: log {len(log)} messages / {log_weight.view_tokens:,} tokens -> '
        f'view {len(view)} messages / {view_weight.view_tokens:,} tokens '
        f'(instructions {view_weight.counted_instructions_tokens:,} of them, counted once)',
        title_justify='left',
    )
    for column, justify in (
        ('log #', 'right'),
        ('role', 'left'),
        ('kind', 'left'),
        ('tokens', 'right'),
        ('view #', 'right'),
        ('role', 'left'),
        ('kind', 'left'),
        ('tokens', 'right'),
        ('what happened', 'left'),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    if log_weight.counted_instructions_tokens or view_weight.counted_instructions_tokens:
        # pydantic-ai stores the instructions on every request but sends only the newest's, once.
        table.add_row(
            '',
            'instructions',
            "the newest request's",
            f'{log_weight.counted_instructions_tokens:,}',
            '',
            'instructions',
            "the newest request's",
            f'{view_weight.counted_instructions_tokens:,}',
            Text('sent once, before the messages', style='dim'),
        )
    for row in rows:
        left = log[row.log_index] if row.log_index is not None else None
        right = view[row.view_index] if row.view_index is not None else None
        what = row.status
        if right is not None and row.status in {'changed', 'inserted'}:
            detail = _changes(right)
            if row.status == 'changed':
                detail = ', '.join(_CHANGE_LABELS.get(k, k) for k in detail.split(', ')) if detail else detail
            what = f'{row.status}: {detail}' if detail else ('repaired' if row.status == 'changed' else what)
        table.add_row(
            '' if row.log_index is None else str(row.log_index),
            _role(left) if left else '',
            _kind(left) if left else '',
            f'{message_tokens(counter, left):,}' if left else '',
            '' if row.view_index is None else str(row.view_index),
            _role(right) if right else '',
            _kind(right) if right else '',
            f'{message_tokens(counter, right):,}' if right else '',
            Text(what, style=_STATUS_STYLE.get(row.status, '')),
        )
    return table


def replacements_table(rows: Sequence[AlignedRow], view: Sequence[ModelMessage]) -> Table | None:
    """What the model reads in place of compacted content, by view message; `None` when nothing was."""
    table = Table(
        title='What the model sees instead (digests, trims, summaries, notes)', title_justify='left'
    )
    table.add_column('view #', justify='right')
    table.add_column('kind')
    table.add_column('text', overflow='fold')
    for row in rows:
        if row.view_index is None or row.status not in {'changed', 'inserted'}:
            continue
        for kind, text in replacement_texts(view[row.view_index]):
            shown = (
                text
                if len(text) <= TEXT_CHARS
                else f'{text[:TEXT_CHARS]}… ({len(text) - TEXT_CHARS:,} more characters)'
            )
            table.add_row(str(row.view_index), kind, Text(shown))
    return table if table.row_count else None


def events_table(events: Sequence[CompactionEvent]) -> Table:
    table = Table(title='What each policy did', title_justify='left')
    for column in ('policy', 'messages', 'tokens', 'saved', 'reason'):
        table.add_column(column, justify='left' if column in {'policy', 'reason'} else 'right')
    if not events:
        table.add_row('-', '', '', '', 'nothing changed')
    for event in events:
        tokens = (
            f'{event.tokens_before:,} -> {event.tokens_after:,}'
            if event.tokens_before is not None and event.tokens_after is not None
            else ''
        )
        saved = event.tokens_saved
        reason = event.reason or ', '.join(r.kind for r in event.repairs)
        table.add_row(
            event.policy,
            f'{event.messages_before} -> {event.messages_after}',
            tokens,
            '' if saved is None else f'{saved:,}',
            reason,
        )
    return table


def gauge(usage: ContextUsageEvent, window: Window, width: int = 40) -> Text:
    """The context gauge; the window's source is the command line's (`--window`, the variable, or the default)."""
    filled = min(width, max(0, round(usage.fraction * width)))
    style = (
        'red'
        if usage.budget_tokens > usage.limit_tokens
        else ('yellow' if usage.over_soft_threshold else 'green')
    )
    text = Text('context ')
    text.append('█' * filled, style=style)
    text.append('░' * (width - filled), style='dim')
    text.append(
        f' {usage.used_tokens:,} / {usage.window_tokens:,} tokens ({usage.fraction:.1%}): '
        f'messages {usage.message_tokens:,}, instructions {usage.instructions_tokens:,}, '
        f'tools {usage.tools_tokens:,}; the view {usage.budget_tokens:,} of limit {usage.limit_tokens:,}; '
        f'counted by {usage.counted_by}\n'
    )
    text.append(f'budget  {usage.budget_line(source=window.budget_source)}', style='dim')
    return text
