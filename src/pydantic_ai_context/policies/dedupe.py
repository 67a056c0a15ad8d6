"""`dedupe_reads`: when the agent reads the same thing again, older copies become a back-reference.

Coding agents re-read files constantly: after an edit, after a test run, or just because the
first read scrolled out of mind. Every copy costs its full size on every later request, yet only
the newest one describes the resource as it is now. Claude Code and Codex treat a re-read the same
way: the latest read supersedes what came before.
"""

from __future__ import annotations

import bisect
import hashlib
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolCallPart, ToolReturnPart

from pydantic_ai_context import _markers, _parts
from pydantic_ai_context._facts import call_summary
from pydantic_ai_context._memo import PART_FIELDS, ObjectMemo
from pydantic_ai_context._scope import scope_cache
from pydantic_ai_context.views import CompileContext

from ._base import LastCall, SyncPolicy, context_key, extend_or_resume, resumable
from ._frontier import Frontier, nominal_part_tokens, observation_indices

__all__ = ('DedupeReads', 'ReadKey', 'dedupe_reads', 'read_key', 'read_path')

ReadKey = Callable[[ToolCallPart], 'str | None']
"""Says which resource a call reads: calls with the same key read the same thing; `None`: not a read."""

MARKER_KIND: Final = 'superseded'

REREAD_NOTE: Final = '[superseded: re-read later by call {id} ({summary}); content omitted]'
REREAD_AFTER_WRITE_NOTE: Final = (
    '[superseded: re-read later by call {id} ({summary}) after the file was modified; '
    'this older content is omitted]'
)
IDENTICAL_NOTE: Final = '[duplicate: identical output to the later call {id} ({summary}); content omitted]'

READ_TOOLS: Final = frozenset(
    {
        'read_file',
        'readfile',
        'read',
        'view_file',
        'open_file',
        'cat',
        'read_text_file',
        'view',
        'get_file_contents',
    }
)
"""Tool names whose calls read the file named by a path argument."""

EDITOR_TOOLS: Final = frozenset(
    {'str_replace_editor', 'str_replace_based_edit_tool', 'text_editor', 'file_editor', 'edit_tool', 'editor'}
)
"""Editor tools (Anthropic / OpenHands style): a read when `command='view'`, a write otherwise."""

SHELL_TOOLS: Final = frozenset(
    {
        'bash',
        'execute_bash',
        'shell',
        'run_shell_command',
        'terminal',
        'run_command',
        'exec',
        'execute_command',
    }
)
"""Shell tools: a read when the command is a plain `cat`/`head`/`tail`/`sed -n`/`nl` of one file."""

WRITE_TOOLS: Final = frozenset(
    {
        'write_file',
        'write',
        'edit_file',
        'edit',
        'create_file',
        'replace',
        'multi_edit',
        'apply_patch',
        'patch',
    }
)
"""Tool names whose calls change the file named by a path argument."""

PATH_ARGS: Final = ('path', 'file_path', 'filename', 'file', 'filepath', 'absolute_path', 'target_file')
RANGE_ARGS: Final = (
    'view_range',
    'offset',
    'limit',
    'start_line',
    'end_line',
    'line_start',
    'line_end',
    'lines',
)

_READ_COMMANDS: Final = frozenset({'cat', 'head', 'tail', 'sed', 'nl'})
_OPTION_VALUES: Final = {
    'head': frozenset({'-n', '-c', '--lines', '--bytes'}),
    'tail': frozenset({'-n', '-c', '--lines', '--bytes'}),
    'sed': frozenset({'-e', '-l'}),
    'nl': frozenset({'-b', '-w', '-s', '-v', '-i', '-n'}),
}
_SHELL_META_RE: Final = re.compile(r'[;&<>`$]|\|\|')
# Bounded, possessive repetitions: `sed -sed -sed ...` would otherwise rescan every option from every
# `sed` (quadratic in the command's length). Eight options before `-i` is more than commands use.
_SHELL_WRITE_RE: Final = re.compile(
    r'>|\bsed\s{1,64}+(?:-\w{1,32}+\s{1,64}+){0,8}-i|\btee\b|\bmv\b|\bcp\b|\brm\b|\bpatch\b'
    r'|\bgit\s{1,64}+(?:apply|checkout|stash)'
)
_HASHES: ObjectMemo[str] = ObjectMemo(max_bytes=8 * 1024 * 1024, fields=PART_FIELDS)
"""Content hashes of the tool results seen, per part (never per text: that would keep outputs alive)."""
_READS: ObjectMemo[tuple[str, str] | tuple[()]] = ObjectMemo(max_bytes=4 * 1024 * 1024, fields=PART_FIELDS)
"""What each call reads, (key, path) or `()` when it is not a read, per call part."""


def _tool(call: ToolCallPart) -> str:
    # MCP servers prefix tool names (`filesystem__read_file`, `fs.read_file`); the suffix is the tool.
    return re.split(r'__|\.|/', call.tool_name.lower())[-1]


def _path_arg(args: dict[str, Any]) -> str | None:
    for name in PATH_ARGS:
        value = args.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _range(args: dict[str, Any]) -> str:
    shown = {name: args[name] for name in RANGE_ARGS if args.get(name) is not None}
    return f'#{_parts.json_text(shown, sort_keys=True)}' if shown else ''


def _shell_read(command: str) -> tuple[str, str] | None:
    """(normalized command, path) when `command` only prints (part of) one file, else None."""
    if '\n' in command.strip() or _SHELL_META_RE.search(command):
        return None
    try:
        stages = [shlex.split(stage) for stage in command.split('|')]
    except ValueError:
        return None
    if not 1 <= len(stages) <= 2 or any(not w or w[0] not in _READ_COMMANDS or _in_place(w) for w in stages):
        return None
    operands = [_operands(w) for w in stages]
    # One file, read by the first command; a second one (`nl -ba f | sed -n '5,9p'`) reads its stdin.
    if len(operands[0]) != 1 or any(operands[1:]):
        return None
    return ' | '.join(' '.join(w) for w in stages), operands[0][0]


def _in_place(words: list[str]) -> bool:
    return words[0] == 'sed' and any(a.startswith(('-i', '--in-place')) for a in words[1:])


def _operands(words: list[str]) -> list[str]:
    """The file arguments of one read command (options, their values and a sed script left out)."""
    takes_value = _OPTION_VALUES.get(words[0], frozenset())
    needs_script = words[0] == 'sed' and '-e' not in words
    out: list[str] = []
    skip = False
    for arg in words[1:]:
        if skip:
            skip = False
        elif arg in takes_value:
            skip = True
        elif arg.startswith('-') and arg != '-':
            continue
        elif needs_script:
            needs_script = False
        else:
            out.append(arg)
    return out


def read_key(call: ToolCallPart) -> str | None:
    """The default `key`: which resource a call reads, for common file-reading tools; None if not a read.

    - `read_file`, `view_file`, `open_file`, `cat`, ... with a path argument (plus any range arguments);
    - editor tools (`str_replace_editor` and variants) with `command='view'` (path + `view_range`);
    - shell tools (`bash`, `execute_bash`, ...) running a plain `cat`, `head`, `tail`, `sed -n` or
      `nl` on one file, optionally piped into one more of those.

    A key is `<tool>:<resource>`, followed by `#<range>` when the call reads only part of it
    (`view_range`, `offset`, `head -n 5`...). A newer read of the whole resource (the key without
    `#`) supersedes older reads of any range of it; a newer ranged read supersedes only the same range.

    Example:
        ```python
        from pydantic_ai.messages import ToolCallPart

        from pydantic_ai_context.policies.dedupe import read_key

        view = ToolCallPart('str_replace_editor', {'command': 'view', 'path': '/repo/a.py'})
        assert read_key(view) == 'str_replace_editor:view:/repo/a.py'
        sed = ToolCallPart('bash', {'command': "sed -n '10,20p' a.py"})
        assert read_key(sed) == 'bash:a.py#sed -n 10,20p a.py'
        assert read_key(ToolCallPart('bash', {'command': 'cat a.py'})) == 'bash:a.py'
        assert read_key(ToolCallPart('bash', {'command': 'pytest -q'})) is None
        ```
    """
    found = _read(call)
    return found[0] if found else None


def read_path(call: ToolCallPart) -> str | None:
    """The file a call reads, for the calls `read_key` recognises; None otherwise."""
    found = _read(call)
    return found[1] if found else None


def _read(call: ToolCallPart) -> tuple[str, str] | None:
    # Remembered per call: a step is read again at each move of the frontier while it is short.
    found = _READS.get(call)
    if found is None:
        read = _find_read(call)
        found = _READS.put(call, read or (), size=sum(map(len, read)) if read else 0)
    return found or None


def _find_read(call: ToolCallPart) -> tuple[str, str] | None:
    tool = _tool(call)
    args = _parts.args_dict(call)
    if tool in READ_TOOLS:
        path = _path_arg(args)
        return (f'{call.tool_name}:{path}{_range(args)}', path) if path else None
    if tool in EDITOR_TOOLS:
        path = _path_arg(args)
        if args.get('command') == 'view' and path:
            return f'{call.tool_name}:view:{path}{_range(args)}', path
        return None
    if tool in SHELL_TOOLS:
        command = args.get('command', args.get('cmd'))
        if isinstance(command, str):
            found = _shell_read(command)
            if found:
                normalized, path = found
                # `cat f` and `nl -ba f` print the whole file; anything else prints a range of it.
                whole = normalized.split(' ', 1)[0] in {'cat', 'nl'} and '|' not in normalized
                return f'{call.tool_name}:{path}' + ('' if whole else f'#{normalized}'), path
    return None


def _writes_to(call: ToolCallPart, path: str) -> bool:
    """Whether `call` may change the file at `path` (editor edits, write tools, shell redirections...)."""
    tool = _tool(call)
    args = _parts.args_dict(call)
    if tool in EDITOR_TOOLS:
        return args.get('command') != 'view' and _same_file(_path_arg(args), path)
    if tool in WRITE_TOOLS:
        return _same_file(_path_arg(args), path) or path in _parts.args_text(call)
    if tool in SHELL_TOOLS:
        command = args.get('command', args.get('cmd'))
        name = path.rsplit('/', 1)[-1]
        return isinstance(command, str) and name in command and _SHELL_WRITE_RE.search(command) is not None
    return False


def _same_file(a: str | None, b: str) -> bool:
    # Agents mix absolute and relative spellings of one file (`/testbed/a/b.py` and `a/b.py`).
    return a is not None and (a == b or a.endswith('/' + b.lstrip('./')) or b.endswith('/' + a.lstrip('./')))


def _content_hash(part: Any) -> str:
    found = _HASHES.get(part)
    if found is None:
        text = _parts.tool_content_text(part.content)
        found = _HASHES.put(
            part, hashlib.blake2b(text.encode('utf-8', 'surrogatepass'), digest_size=12).hexdigest(), size=24
        )
    return found


@dataclass
class _Result:
    index: int
    """Index of the request holding the result."""
    part: Any
    call: ToolCallPart | None
    key: str | None
    path: str | None
    hash: str | None
    usable: bool
    """A successful result that a newer copy may supersede, or that may supersede an older one."""


@dataclass(kw_only=True)
class DedupeReads(SyncPolicy):
    """Replace older copies of a re-read resource, and older identical tool outputs, by a back-reference.

    Two results are copies when their calls read the same resource (`key`, e.g. the same file
    viewed with the same range) or when the same tool returned the very same content. The older
    copy keeps its `tool_call_id` and tool name; its content becomes
    `[superseded: re-read later by call <id> (<call>); content omitted]` (or `[duplicate: ...]`)
    pointing at the next copy, so each placeholder stays the same however many copies follow.

    A write to the file between two reads (an editor edit, a write tool, a shell redirection or
    `sed -i` naming it) does not stop the older read from being superseded: the newer read shows
    the file as it is now, which is what the agent needs (the same rule as Claude Code and Codex).
    The placeholder says the file was modified in between. Set `across_writes=False` to keep reads
    of older versions instead.

    Never touched: failed results (the newer copy must succeed too), pinned parts, results already
    compacted by another policy, results below `min_tokens`, and the recency window. For prompt-cache
    stability a copy is superseded only once its *newer* copy has left the recency window, and the
    window moves in steps (`policies._frontier.Frontier`; pass a profile's shared `frontier` so
    dedupe moves with trim and mask).

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
        from pydantic_ai.messages import UserPromptPart

        from pydantic_ai_context.policies.dedupe import dedupe_reads

        source = 'def main():\\n' + '    print("hello")\\n' * 40
        log = [ModelRequest(parts=[UserPromptPart('Fix main.py')])]
        for i in range(5):  # the agent reads main.py twice, then runs three commands
            read = i < 2
            name, args, output = ('read_file', {'path': 'main.py'}, source) if read else ('ls', {}, str(i))
            log.append(ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f'c{i}')]))
            log.append(ModelRequest(parts=[ToolReturnPart(name, output, tool_call_id=f'c{i}')]))
        view = dedupe_reads(keep_recent=1, step=4)(log)
        assert view[2].parts[0].content.startswith('[superseded: re-read later by call c1')
        assert view[4].parts[0].content == source  # the newest copy stays
        ```
    """

    name: str = 'dedupe_reads'
    """The step's name in a profile's chain."""
    key: ReadKey = read_key
    """Which resource a call reads (`None`: not a read); the default knows file, editor and shell tools."""
    identical_outputs: bool = True
    """Also collapse the same tool returning exactly the same content, whatever the call."""
    across_writes: bool = True
    """Supersede a read even when the file was written between it and the re-read."""
    keep_recent: int = 3
    """Observations (requests with tool results) at the end of the view that are never touched."""
    step: int = 5
    """Observations the frontier moves by at once, so the cached prompt prefix changes only in steps."""
    frontier: Frontier | None = None
    """A shared frontier (from a profile); when set, it replaces `keep_recent` and `step`."""
    min_tokens: int = 64
    """Copies smaller than this stay: a back-reference would save little and still change the prefix."""
    within_step: bool = True
    """Supersede a copy only by a newer copy in the same frontier step. Both then leave the recency
    window at the same jump, so superseding never rewrites a part of the prompt that an earlier
    request already sent (replaying the shared runs: superseding across steps cost more in broken
    prompt-cache prefixes than it saved). Each step is then independent, so when the frontier moves
    only the steps it newly passed are read; with `False`, each move re-reads the whole prefix."""

    def __post_init__(self) -> None:
        self._frontier()  # validates keep_recent and step now rather than at the first compile

    def _frontier(self) -> Frontier:
        return self.frontier or Frontier(keep_recent=self.keep_recent, step=self.step)

    def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        frontier = self._frontier().locate(messages, context, slot=(self.name, id(self)))
        if frontier == 0:
            return list(messages)
        # Only copies behind the frontier change: while it stays put, the output for a longer log
        # is the previous output plus the new messages; when it moves, the steps it had already
        # passed are kept (`_by_step`).
        key = (context_key(context), frontier)
        return extend_or_resume(
            self, messages, key, context, lambda: self._apply(messages, frontier, context)
        )

    def _apply(
        self, messages: list[ModelMessage], frontier: int, context: CompileContext
    ) -> tuple[list[ModelMessage], _StepState | None]:
        state: _StepState | None = None
        if self.within_step:
            out, state = self._by_step(messages, frontier, context)
            n = state.superseded
        else:
            # Across steps a new copy may supersede any older one: a whole pass at each move.
            replaced = self._supersede(messages, frontier, context)
            out = list(messages)
            _replace(messages, out, replaced)
            n = len(replaced)
        if n:
            context.note(
                f'superseded {n} older cop{"y" if n == 1 else "ies"} of re-read or repeated output',
                superseded=n,
            )
        return out, state

    def _by_step(
        self, messages: list[ModelMessage], frontier: int, context: CompileContext
    ) -> tuple[list[ModelMessage], _StepState]:
        """`_supersede` on each frontier step on its own (the response before its first observation
        through its last observation).

        A step's result depends on its messages alone. When the frontier moves, the steps of the
        previous pass whose messages are all the same objects as before (and that were complete:
        the last one may gain observations) keep their output; only the steps after them are
        computed, so a compile costs the new steps, not the whole log.
        """
        step = self._frontier().step
        resumed = self._resume(messages, frontier, step, context)
        if resumed is None:
            observations = observation_indices(messages[:frontier])
            steps: list[_Step] = []
            superseded = 0
            out = list(messages)
        else:
            previous, before, kept = resumed
            steps = previous.steps[:kept]
            start = steps[-1].end
            observations = previous.observations[: kept * step]
            observations.extend(i for i in range(start, frontier) if _is_observation(messages[i]))
            superseded = previous.superseded - sum(len(s.replaced) for s in previous.steps[kept:])
            out = before.output[:start]
            out += messages[start:]
        replaced: dict[tuple[int, int], Any] = {}
        memo = scope_cache(('dedupe.steps', id(self)))
        for first in range(len(steps) * step, len(observations), step):
            last = observations[min(first + step, len(observations)) - 1]
            lo = max(observations[first] - 1, 0)
            complete = first + step <= len(observations)
            # The last step, when short, gains observations as the frontier moves: not remembered.
            found = self._step(messages, lo, last + 1, memo if complete else None, context)
            steps.append(_Step(last + 1, found, complete))
            superseded += len(found)
            for (index, part_id), part in found.items():
                replaced[(index + lo, part_id)] = part
        # Never the first message of a step (the response before it, or the last observation of
        # the previous step, whose calls it does not hold): what the kept steps made stays.
        _replace(messages, out, replaced)
        return out, _StepState(frontier, step, observations, steps, superseded)

    def _step(
        self,
        messages: list[ModelMessage],
        lo: int,
        end: int,
        memo: dict[Any, Any] | None,
        context: CompileContext,
    ) -> dict[tuple[int, int], Any]:
        """What one step (`messages[lo:end]`) supersedes, by index in the step. During a compile it
        is also remembered by the identity of the step's messages (in the compiling scope's
        generation, which no in-place edit survives), for a full pass that cannot resume."""
        segment = tuple(messages[lo:end])
        key = tuple(map(id, segment))
        # The entry holds its segment's messages, so no other object has taken their ids: the
        # same ids are the same messages.
        found = memo.get(key) if memo is not None else None
        if found is None:
            found = (segment, self._supersede(segment, len(segment), context))
            if memo is not None:
                if len(memo) >= 4_096:
                    memo.clear()
                memo[key] = found
        return found[1]  # type: ignore[no-any-return]

    def _resume(
        self, messages: list[ModelMessage], frontier: int, step: int, context: CompileContext
    ) -> tuple[_StepState, LastCall, int] | None:
        """The previous pass, its output, and how many of its steps hold for `messages`: the
        complete steps that end before the first message that changed (or its frontier)."""
        found = resumable(self._last, _StepState, messages, frontier, context)
        if found is None:
            return None
        last, previous, same = found
        if previous.step != step:
            return None
        kept = len(previous.steps)
        while kept and (previous.steps[kept - 1].end > same or not previous.steps[kept - 1].complete):
            kept -= 1
        return (previous, last, kept) if kept else None

    def _identify(self, call: ToolCallPart | None) -> tuple[str | None, str | None]:
        """(key, path read) of a call; the path is known only for the default key."""
        if call is None:
            return None, None
        if self.key is read_key:
            found = _read(call)
            return found if found is not None else (None, None)
        return self.key(call), None

    @staticmethod
    def _newer_read(key: str | None, newer_by_key: dict[str, _Result]) -> _Result | None:
        """The nearest newer read of the same resource: same key, or all of what `key` is a range of."""
        if key is None:
            return None
        same = newer_by_key.get(key)
        base = key.split('#', 1)[0]
        whole = newer_by_key.get(base) if base != key else None
        if same is None or whole is None:
            return same or whole
        return same if same.index < whole.index else whole

    def _results(self, messages: Sequence[ModelMessage], frontier: int) -> list[_Result]:
        out: list[_Result] = []
        for i, message in enumerate(messages[:frontier]):
            if not isinstance(message, ModelRequest):
                continue
            prev = messages[i - 1] if i > 0 else None
            calls = {c.tool_call_id: c for c in _parts.tool_calls(prev)} if prev is not None else {}
            for part in _parts.tool_results(message):
                call = calls.get(part.tool_call_id)
                key, path = self._identify(call)
                usable = (
                    call is not None
                    and type(part) is ToolReturnPart
                    and not _parts.is_failed_result(part)
                    and not _parts.is_pinned(part)
                    and not _markers.is_readback(part)
                )
                record = _parts.marker(part)
                content_hash: str | None = None
                if usable and self.identical_outputs:
                    if record is None:
                        content_hash = _content_hash(part)
                    elif record.get('kind') == MARKER_KIND and isinstance(record.get('hash'), str):
                        # Our own placeholder: the hash of what it replaced keeps it a link in the chain.
                        content_hash = record['hash']
                out.append(_Result(i, part, call, key, path, content_hash, usable))
        return out

    def _supersede(
        self, messages: Sequence[ModelMessage], frontier: int, context: CompileContext
    ) -> dict[tuple[int, int], Any]:
        """New parts by (request index, id(old part)), walking from the newest result to the oldest.

        Each copy points at the *next* copy, not the newest: its placeholder then never changes as
        more copies arrive, and the cached prefix holding it stays valid.
        """
        writes = _write_calls(messages[:frontier])
        write_at = [i for i, _ in writes]
        newer_by_key: dict[str, _Result] = {}
        newer_by_hash: dict[tuple[str, str], _Result] = {}
        replaced: dict[tuple[int, int], Any] = {}
        for result in reversed(self._results(messages, frontier)):
            if not result.usable or result.call is None:
                continue
            target = self._newer_read(result.key, newer_by_key)
            note = REREAD_NOTE
            if target is not None and result.path is not None:
                lo, hi = (
                    bisect.bisect_right(write_at, result.index),
                    bisect.bisect_left(write_at, target.index),
                )
                if any(_writes_to(call, result.path) for _, call in writes[lo:hi]):
                    note = REREAD_AFTER_WRITE_NOTE
                    if not self.across_writes:
                        target = None
            hash_key = (result.call.tool_name, result.hash) if result.hash is not None else None
            if target is None and hash_key is not None:
                target = newer_by_hash.get(hash_key)
                note = IDENTICAL_NOTE
            if result.key is not None:
                newer_by_key[result.key] = result
            if hash_key is not None:
                newer_by_hash[hash_key] = result
            if target is None or target.call is None or _parts.marker(result.part) is not None:
                continue
            tokens = nominal_part_tokens(result.part, context.counter)
            text = note.format(id=target.call.tool_call_id, summary=call_summary(target.call, max_len=100))
            marked_text = _markers.with_ref(text, result.part.tool_call_id)
            if tokens < self.min_tokens or context.counter.count_text(marked_text) >= tokens:
                continue
            record: dict[str, Any] = {
                'kind': MARKER_KIND,
                'by': target.call.tool_call_id,
                'reason': 'identical' if note is IDENTICAL_NOTE else 'reread',
                'tokens': tokens,
            }
            if result.hash is not None:
                record['hash'] = result.hash
            replaced[(result.index, id(result.part))] = _markers.mark_result(
                result.part, text, record, context.originals
            )
        return replaced


@dataclass(frozen=True, slots=True)
class _Step:
    """One frontier step of a `DedupeReads` pass."""

    end: int
    """The index after its last observation."""
    replaced: dict[tuple[int, int], Any]
    """New parts by (index in the step, id(old part))."""
    complete: bool
    """It holds a whole `step` of observations (the last step of a pass may hold fewer)."""


@dataclass(frozen=True)
class _StepState:
    """What a pass of `DedupeReads` (`within_step`) leaves for the next one to resume from."""

    frontier: int
    step: int
    observations: list[int]
    """The observations before the frontier."""
    steps: list[_Step]
    superseded: int
    """Copies superseded by all the steps."""


def _is_observation(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and bool(_parts.tool_results(message))


def _replace(
    messages: Sequence[ModelMessage], out: list[ModelMessage], replaced: dict[tuple[int, int], Any]
) -> None:
    """Put the new parts (by (index, id(old part))) of `replaced` in `out` (a copy of `messages`)."""
    for index in sorted({i for i, _ in replaced}):
        message = messages[index]
        out[index] = _parts.replace_parts(message, [replaced.get((index, id(p)), p) for p in message.parts])


def dedupe_reads(**settings: Any) -> DedupeReads:
    """Older copies of re-read resources and identical outputs become back-references; see `DedupeReads`.

    Example:
        ```python
        from pydantic_ai_context.policies.dedupe import dedupe_reads

        policy = dedupe_reads(keep_recent=5)
        assert policy.name == 'dedupe_reads' and policy.keep_recent == 5
        ```
    """
    return DedupeReads(**settings)


def _write_calls(messages: Sequence[ModelMessage]) -> list[tuple[int, ToolCallPart]]:
    """(response index, call) of every call that may write a file, in order."""
    out: list[tuple[int, ToolCallPart]] = []
    for i, message in enumerate(messages):
        for call in _parts.tool_calls(message):
            tool = _tool(call)
            if tool in EDITOR_TOOLS or tool in WRITE_TOOLS or tool in SHELL_TOOLS:
                out.append((i, call))
    return out
