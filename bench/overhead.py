"""Compile-time overhead of every preset on synthetic histories of 1,000, 5,000 and 20,000 messages.

Usage: `python bench/overhead.py [--sizes 1000 5000 20000] [--requests 30] [--profile NAME ...] [--shape SHAPE ...]
[--window 128000 --window 32000] [--adversarial-kb 100 250 500 1000 2000 5000] [--adversarial-window 32000]
[--memory 5000]`
(an empty `--sizes` or `--adversarial-kb` skips that table)

Every size is timed on each history shape (`--shape`, default all): `tool-loop`, the synthetic
history below; `chat-tools`, a chat with a tool-using assistant (a user turn every 8 tool rounds,
each run ending with a text answer); `long-notes`, a tool loop with about 700 tokens of model text
in every response; `observations`, mini-swe-agent style (the command in the model's text, the
output as a user prompt, no tool calls); `interleaved`, four `chat-tools` conversations of a
quarter of the size each, compiled in turn through one profile (each timed request compiles every
one of them once more).

The `tool-loop` history is a long coding-agent run: a shell tool, an editor that views and re-views a
set of files, and a `think` tool, with large outputs (13 kB per shell or editor return, so about 28 MB
of text at 5,000 messages) that carry file paths and error lines. For each size, window and preset
the benchmark compiles the log without its last `--requests` steps once (the first compile: cold),
then replays those `--requests` requests as a run would make them, back to back (each input two
messages longer than the one before: a response and the request with its tool result; one profile
instance, one shared token counter), and reports the median, p95 and max milliseconds per compile,
wall clock and CPU time (`time.process_time`: what the compile itself cost when other processes
share the machine). Summarising presets get a stub summariser (a `FunctionModel` with a 1M-token
window that answers at once), so what is timed is the policy's own work; a summary made ahead is
left to land between two requests (as it does while the model answers), outside the timed compile.
The garbage collector is frozen after building each history (see `main`). *point p50 / p95* is
what the request path adds after each steady compile on Anthropic and Bedrock: placing the fourth
cache breakpoint (`_cache_points.add_cache_point`; wall ms, outside the timed compile).

`--memory N [N ...]` adds a table of what the library holds once the `--requests` compiles of an
N-message history are done (`tracemalloc`, by the file that allocated it: `pydantic_ai_context`'s
own modules), against the log's own size as Python objects: in all, what is freed with the
profile (its folds and kept passes, its memos, the shortened copies it keeps), the view's own
objects beyond those, and the process-wide memos of values read off messages (freed with the
messages). Traced separately from the timed runs (tracing slows every allocation).

A second table (`--adversarial-kb`) times the first compile of a short coding run whose first tool
result (old by then: trimmed and masked, its facts extracted) is one adversarial output of 100 kB to
5 MB: a run of one letter (what a base-N dump, a minified blob or `'A' * n` looks like to a pattern)
or a hex dump. Counting the output's tokens is part of that compile: with tiktoken (most of the
time) and with the heuristic counter, the best of two fresh outputs each. The milliseconds per MB
stay flat when compiling grows linearly with the output's size (issue 13: before the fix, with one
100 kB run a compile took 0.3 s, 150 kB 28 s, 200 kB 149 s, and 5 MB did not finish in 13 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from rich.console import Console
from rich.table import Table

from pydantic_ai_context import HeuristicCounter, TiktokenCounter, TokenCounter, available_profiles, profile
from pydantic_ai_context._cache_points import CachePointPlan, add_cache_point
from pydantic_ai_context.replay import percentile

SIZES = (1_000, 5_000, 20_000)
WINDOWS = (128_000, 32_000)
REQUESTS = 30
OUTPUT_CHARS = 13_000
FILES = 40
ADVERSARIAL_KB = (100, 250, 500, 1_000, 2_000, 5_000)
ADVERSARIAL_KINDS = ('run', 'hex')
ADVERSARIAL_PROFILES = ('coding', 'chat', 'long_horizon')
ADVERSARIAL_REPEATS = 2


def synthetic_history(n_messages: int, *, output_chars: int = OUTPUT_CHARS) -> list[ModelMessage]:
    """A valid single-run history of `n_messages` messages (ending with a request) with large tool outputs."""
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[
                SystemPromptPart('You are a coding agent working in /repo.'),
                UserPromptPart('Fix the failing test in src/pkg/core.py and explain the cause.'),
            ]
        )
    ]
    step = 0
    while len(messages) < n_messages - 1:
        call_id = f'call_{step:06d}'
        path = f'/repo/src/pkg/module_{step % FILES}.py'
        kind = step % 4
        if kind == 0:
            name, args = 'execute_bash', {'command': f'python -m pytest tests/test_{step % FILES}.py -x -q'}
            output = _pytest_output(step, output_chars)
        elif kind in (1, 2):
            name, args = 'str_replace_editor', {'command': 'view', 'path': path}
            output = _file_view(path, output_chars)
        else:
            name, args = (
                'think',
                {'thought': f'Step {step}: the failure in {path} comes from the parser. ' * 3},
            )
            output = 'Your thought has been logged.'
        messages.append(
            ModelResponse(
                parts=[
                    TextPart(f'Step {step}: checking {path}.'),
                    ToolCallPart(name, args, tool_call_id=call_id),
                ]
            )
        )
        messages.append(ModelRequest(parts=[ToolReturnPart(name, output, tool_call_id=call_id)]))
        step += 1
    # One system+user request, then response/request pairs: the length is odd and ends with a request.
    return messages


def chat_with_tools_history(
    n_messages: int, *, output_chars: int = OUTPUT_CHARS, rounds: int = 8
) -> list[ModelMessage]:
    """A chat with a tool-using assistant: a user turn every `rounds` tool rounds, each run ending
    with a text answer (about 300 finished runs at 5,000 messages)."""
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[
                SystemPromptPart('You are a helpful assistant with a shell and an editor in /repo.'),
                UserPromptPart('Help me fix the failing tests in src/pkg, one module at a time.'),
            ]
        )
    ]
    step = run = 0
    while len(messages) < n_messages - 1:
        if step and step % rounds == 0:
            if len(messages) >= n_messages - 3:
                break
            messages.append(ModelResponse(parts=[TextPart(f'Run {run}: module_{run % FILES}.py is fixed.')]))
            run += 1
            messages.append(
                ModelRequest(parts=[UserPromptPart(f'Thanks. Now look at module_{run % FILES}.py, please.')])
            )
        messages.extend(
            _tool_round(step, output_chars, note=f'Step {step}: checking module_{step % FILES}.py.')
        )
        step += 1
    return messages


def long_notes_history(n_messages: int, *, output_chars: int = OUTPUT_CHARS // 4) -> list[ModelMessage]:
    """A tool loop whose every response carries a long model note (about 700 tokens)."""
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[
                SystemPromptPart('You are a research agent working in /repo.'),
                UserPromptPart('Audit the parser in src/pkg and write up every risk you find.'),
            ]
        )
    ]
    step = 0
    while len(messages) < n_messages - 1:
        note = ' '.join(
            f'Step {step}, point {i}: the parser in module_{(step + i) % FILES}.py accepts token {step * 7 + i} '
            f'without checking its width, so a long input may overflow the buffer.'
            for i in range(22)
        )
        messages.extend(_tool_round(step, output_chars, note=note))
        step += 1
    return messages


def observations_history(n_messages: int, *, output_chars: int = OUTPUT_CHARS // 4) -> list[ModelMessage]:
    """A mini-swe-agent style loop: the model writes a command in its text, the observation comes
    back as a user prompt (no tool calls at all)."""
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[
                SystemPromptPart('You are a software engineer. Reply with one bash command in a block.'),
                UserPromptPart('Fix the failing test in src/pkg/core.py.'),
            ]
        )
    ]
    step = 0
    while len(messages) < n_messages - 1:
        path = f'/repo/src/pkg/module_{step % FILES}.py'
        command = f'python -m pytest tests/test_{step % FILES}.py -x -q' if step % 2 else f'cat -n {path}'
        output = _pytest_output(step, output_chars) if step % 2 else _file_view(path, output_chars)
        messages.append(
            ModelResponse(
                parts=[TextPart(f'THOUGHT: step {step}, checking {path}.\n```bash\n{command}\n```')]
            )
        )
        messages.append(
            ModelRequest(parts=[UserPromptPart(f'<returncode>0</returncode>\n<output>\n{output}\n</output>')])
        )
        step += 1
    return messages


def _tool_round(step: int, output_chars: int, *, note: str) -> list[ModelMessage]:
    call_id = f'call_{step:06d}'
    path = f'/repo/src/pkg/module_{step % FILES}.py'
    if step % 2:
        name, args = 'execute_bash', {'command': f'python -m pytest tests/test_{step % FILES}.py -x -q'}
        output = _pytest_output(step, output_chars)
    else:
        name, args = 'str_replace_editor', {'command': 'view', 'path': path}
        output = _file_view(path, output_chars)
    return [
        ModelResponse(parts=[TextPart(note), ToolCallPart(name, args, tool_call_id=call_id)]),
        ModelRequest(parts=[ToolReturnPart(name, output, tool_call_id=call_id)]),
    ]


SHAPES = {
    'tool-loop': synthetic_history,
    'chat-tools': chat_with_tools_history,
    'long-notes': long_notes_history,
    'observations': observations_history,
}
"""Every shape of history the matrix times (`interleaved` is four `chat-tools` logs through one profile)."""


def _pytest_output(step: int, chars: int) -> str:
    lines = [f'tests/test_{step % FILES}.py::test_case_{i} PASSED' for i in range(40)]
    lines += [
        'Traceback (most recent call last):',
        f'  File "/repo/src/pkg/module_{step % FILES}.py", line {step % 300 + 1}, in parse',
        f'ValueError: unexpected token at position {step}',
        f'FAILED tests/test_{step % FILES}.py::test_case_40 - ValueError',
    ]
    return _pad('\n'.join(lines), chars, f'log line for step {step}')


def _file_view(path: str, chars: int) -> str:
    header = f"Here's the result of running `cat -n` on {path}:"
    body = '\n'.join(f'{i:6}\tdef function_{i}(value):  # handles case {i}' for i in range(1, 400))
    return _pad(f'{header}\n{body}', chars, '# padding')


def _pad(text: str, chars: int, filler: str) -> str:
    while len(text) < chars:
        text += f'\n{filler} {len(text)}'
    return text[:chars]


def stub_summariser() -> FunctionModel:
    """A summariser that answers at once, with a window that takes any transcript here."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(
            parts=[TextPart('Goal: fix the failing test. Done: read the modules, ran the tests.')]
        )

    return FunctionModel(answer, model_name='stub-summariser', profile={'context_window': 1_000_000})


async def measure(
    log: Sequence[ModelMessage] | Sequence[Sequence[ModelMessage]],
    name: str,
    *,
    requests: int,
    window: int,
    counter: TiktokenCounter,
) -> dict[str, float]:
    """Time one cold compile, then `requests` steady ones. `log` may be several logs (a list of
    lists): they go through one profile in turn, each request compiling every log once more."""
    logs: list[Sequence[ModelMessage]] = (
        [list(x) for x in log] if log and isinstance(log[0], list) else [log]  # type: ignore[list-item]
    )
    if name == 'transparent':
        # It does not compact, so over the window it raises (check_budget): give it a window the
        # whole log fits (twice its characters bounds its tokens; counting here would warm the
        # counter and flatter the cold compile), and measure the window check with the rest.
        window = max(window, max(2 * sum(len(_text(m)) for m in one) for one in logs))
    compiled = profile(name, context_window=window, counter=counter, summary_model=stub_summariser())
    ends = [[len(one) - 2 * k for k in range(requests, -1, -1) if len(one) - 2 * k > 0] for one in logs]
    cold = cold_cpu = 0.0
    for one, its_ends in zip(logs, ends, strict=True):
        started, cpu = time.perf_counter(), time.process_time()
        await compiled.compile(one[: its_ends[0]])
        cold += (time.perf_counter() - started) * 1000
        cold_cpu += (time.process_time() - cpu) * 1000
        await compiled.settle_background()
    times: list[float] = []
    cpu_times: list[float] = []
    point_times: list[float] = []
    # What the request path adds on Anthropic and Bedrock after the compile (`_cache_points`).
    plan = CachePointPlan()
    for at in range(1, min(len(e) for e in ends)):
        for k, (one, its_ends) in enumerate(zip(logs, ends, strict=True)):
            started, cpu = time.perf_counter(), time.process_time()
            view = await compiled.compile(one[: its_ends[at]])
            times.append((time.perf_counter() - started) * 1000)
            cpu_times.append((time.process_time() - cpu) * 1000)
            started = time.perf_counter()
            add_cache_point(plan, view, model=_ANTHROPIC, settings={'cache': True}, conversation=k)
            point_times.append((time.perf_counter() - started) * 1000)
            # The model answers between two requests of a run, and a summary made ahead is written
            # meanwhile: its work is not the next compile's (replay settles the same way).
            await compiled.settle_background()
    await compiled.close_background()
    times = times or [cold]
    cpu_times = cpu_times or [cold_cpu]
    return {
        'cold_ms': cold,
        'cold_cpu_ms': cold_cpu,
        'median_ms': statistics.median(times),
        'p95_ms': percentile(times, 95),
        'max_ms': max(times),
        'median_cpu_ms': statistics.median(cpu_times),
        'p95_cpu_ms': percentile(cpu_times, 95),
        'max_cpu_ms': max(cpu_times),
        'point_p50_ms': statistics.median(point_times) if point_times else 0.0,
        'point_p95_ms': percentile(point_times, 95) if point_times else 0.0,
    }


class _Anthropic:
    """Stands for a model served by Anthropic: the request path places its breakpoint for it."""

    system = 'anthropic'


_ANTHROPIC = _Anthropic()


def shape_logs(shape: str, size: int) -> list[ModelMessage] | list[list[ModelMessage]]:
    """The history (or histories) of `size` messages in all for `shape`."""
    if shape != 'interleaved':
        return SHAPES[shape](size)
    logs: list[list[ModelMessage]] = []
    for k in range(4):
        one = chat_with_tools_history(size // 4)
        first = one[0]
        assert isinstance(first, ModelRequest)
        parts = [
            dataclasses.replace(part, content=f'User {k}: {part.content}')
            if isinstance(part, UserPromptPart)
            else part
            for part in first.parts
        ]
        logs.append([dataclasses.replace(first, parts=parts), *one[1:]])
    return logs


def adversarial_output(kind: str, chars: int, *, seed: int) -> str:
    """`chars` characters of one adversarial output: a run of one letter, or a hex dump."""
    if kind == 'run':
        return chr(ord('A') + seed % 26) * chars
    return random.Random(seed).randbytes(chars // 2 + 1).hex()[:chars]


def adversarial_history(output: str) -> list[ModelMessage]:
    """A short coding run whose first tool result (old by the end: trimmed, then masked) is `output`."""
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[SystemPromptPart('You are a coding agent.'), UserPromptPart('Why does it crash?')]
        )
    ]
    for step in range(8):
        output_here = output if step == 0 else _pytest_output(step, 2_000)
        call = ToolCallPart('execute_bash', {'command': f'cat dump_{step}.bin'}, tool_call_id=f'c{step}')
        messages.append(ModelResponse(parts=[TextPart(f'Step {step}.'), call]))
        messages.append(
            ModelRequest(parts=[ToolReturnPart('execute_bash', output_here, tool_call_id=f'c{step}')])
        )
    return messages


_LIBRARY = str(Path(__file__).resolve().parents[1] / 'src' / 'pydantic_ai_context')


def _library_bytes() -> int:
    """Bytes still allocated by the library's own modules (tracemalloc must be tracing)."""
    import pydantic_ai_context

    roots = (str(Path(pydantic_ai_context.__file__).parent), _LIBRARY)
    snapshot = tracemalloc.take_snapshot()
    return sum(s.size for s in snapshot.statistics('filename') if s.traceback[0].filename.startswith(roots))


async def kept_state(size: int, name: str, *, requests: int, window: int) -> dict[str, float]:
    """MB after `requests + 1` compiles of a `size`-message history: the log as Python objects; what
    the library allocated and still holds; of it, what is freed with the profile (its folds, kept
    passes, memos and the shortened copies it keeps); the view's own objects beyond those; and the
    process-wide memos of values read off messages, which live as long as the messages do."""
    tracemalloc.start(1)
    try:
        log = synthetic_history(size)
        log_bytes = tracemalloc.get_traced_memory()[0]
        counter = TiktokenCounter()
        compiled = profile(name, context_window=window, counter=counter, summary_model=stub_summariser())
        ends = [len(log) - 2 * k for k in range(requests, -1, -1) if len(log) - 2 * k > 0]
        view: list[ModelMessage] = []
        for end in ends:
            view = await compiled.compile(log[:end])
        await compiled.close_background()
        gc.collect()
        everything = _library_bytes()
        del compiled, counter
        gc.collect()
        without_profile = _library_bytes()
        del view
        gc.collect()
        memos = _library_bytes()
    finally:
        tracemalloc.stop()
    return {
        'log': log_bytes / 1e6,
        'kept': everything / 1e6,
        'profile': (everything - without_profile) / 1e6,
        'view': (without_profile - memos) / 1e6,
        'memos': memos / 1e6,
    }


async def memory_table(
    sizes: Sequence[int], names: Sequence[str], windows: Sequence[int], requests: int
) -> Table:
    table = Table(
        title=f'What the library holds after {requests + 1} compiles (MB, tracemalloc)', title_justify='left'
    )
    columns = (
        'messages',
        'window',
        'profile',
        'log',
        'held',
        'the profile',
        'the view',
        'process-wide memos',
    )
    for column in columns:
        table.add_column(column, justify='left' if column == 'profile' else 'right')
    for size in sizes:
        for window in windows:
            for name in names:
                row = await kept_state(size, name, requests=requests, window=window)
                table.add_row(
                    f'{size:,}',
                    f'{window // 1000}k',
                    name,
                    *(f'{row[k]:.1f}' for k in ('log', 'kept', 'profile', 'view', 'memos')),
                )
                print(
                    'memory',
                    size,
                    window,
                    name,
                    {k: round(v, 1) for k, v in row.items()},
                    file=sys.stderr,
                    flush=True,
                )
    return table


async def _first_compile_ms(name: str, log: list[ModelMessage], counter: TokenCounter, window: int) -> float:
    compiled = profile(name, context_window=window, counter=counter)
    started = time.perf_counter()
    await compiled.compile(log)
    return (time.perf_counter() - started) * 1000


async def adversarial_table(sizes_kb: Sequence[int], window: int) -> Table:
    table = Table(
        title=f'One adversarial tool output: the first compile after it arrives (window {window:,})',
        title_justify='left',
    )
    columns = ('output', 'kind', 'profile', 'ms', 'ms / MB', 'ms, heuristic counter', 'ms / MB, heuristic')
    for column in columns:
        table.add_column(column, justify='left' if column in ('kind', 'profile') else 'right')
    seed = 0
    for kb in sizes_kb:
        for kind in ADVERSARIAL_KINDS:
            for name in ADVERSARIAL_PROFILES:
                # A new output (and counter) for every measurement: nothing is remembered from an
                # earlier one, so counting the output's tokens is part of the time, as in a run.
                # The best of `ADVERSARIAL_REPEATS` keeps other processes' noise out.
                times: dict[str, list[float]] = {'exact': [], 'heuristic': []}
                for _ in range(ADVERSARIAL_REPEATS):
                    for label, counter in (('exact', TiktokenCounter()), ('heuristic', HeuristicCounter())):
                        seed += 1
                        log = adversarial_history(adversarial_output(kind, kb * 1_000, seed=seed))
                        times[label].append(await _first_compile_ms(name, log, counter, window))
                exact, heuristic = min(times['exact']), min(times['heuristic'])
                megabytes = kb / 1_000
                table.add_row(
                    f'{kb:,} kB',
                    kind,
                    name,
                    f'{exact:,.0f}',
                    f'{exact / megabytes:,.0f}',
                    f'{heuristic:,.0f}',
                    f'{heuristic / megabytes:,.0f}',
                )
    return table


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        '--sizes', type=int, nargs='*', default=list(SIZES), help='history sizes (none: skip)'
    )
    parser.add_argument('--requests', type=int, default=REQUESTS, help='timed compiles per size and preset')
    parser.add_argument(
        '--shape',
        action='append',
        choices=[*SHAPES, 'interleaved'],
        help='history shape(s) (default: every shape)',
    )
    parser.add_argument('--profile', action='append', help='preset(s) (default: every preset)')
    parser.add_argument(
        '--window', type=int, action='append', help='context window(s) (default: 128k and 32k)'
    )
    parser.add_argument(
        '--adversarial-kb',
        type=int,
        nargs='*',
        default=list(ADVERSARIAL_KB),
        help='sizes in kB of the adversarial output (none: skip that table)',
    )
    parser.add_argument('--adversarial-window', type=int, default=32000)
    parser.add_argument(
        '--memory',
        type=int,
        nargs='*',
        default=[],
        help='history sizes whose kept state to trace (default: none)',
    )
    args = parser.parse_args(argv)
    console = Console(width=160)
    names = args.profile or available_profiles()
    windows = args.window or list(WINDOWS)
    table = Table(
        title=f'Compile time per request, {args.requests} requests back to back after the first compile (ms)',
        title_justify='left',
    )
    columns = (
        'shape',
        'messages',
        'MB',
        'window',
        'profile',
        'first',
        'first CPU',
        'p50',
        'p95',
        'max',
        'CPU p50',
        'CPU p95',
        'CPU max',
        'point p50',
        'point p95',
    )
    for column in columns:
        table.add_column(column, justify='left' if column == 'profile' else 'right')
    shapes = args.shape or [*SHAPES, 'interleaved']
    for shape in shapes:
        for size in args.sizes:
            log = shape_logs(shape, size)
            # The log is long-lived in a real process too; freezing it keeps full collections of the
            # large fixture (pauses of 100+ ms, unrelated to compiling) out of the p95.
            gc.collect()
            gc.freeze()
            flat = [m for one in log for m in one] if shape == 'interleaved' else log
            megabytes = sum(len(_text(m)) for m in flat) / 1e6  # type: ignore[arg-type]
            for window in windows:
                # One counter per size and window: its per-message memo is warm after the first compile, as in a run.
                counter = TiktokenCounter()
                for name in names:
                    row = await measure(log, name, requests=args.requests, window=window, counter=counter)
                    table.add_row(
                        shape,
                        f'{len(flat):,}',
                        f'{megabytes:.1f}',
                        f'{window // 1000}k',
                        name,
                        f'{row["cold_ms"]:,.0f}',
                        f'{row["cold_cpu_ms"]:,.0f}',
                        f'{row["median_ms"]:.1f}',
                        f'{row["p95_ms"]:.1f}',
                        f'{row["max_ms"]:.1f}',
                        f'{row["median_cpu_ms"]:.1f}',
                        f'{row["p95_cpu_ms"]:.1f}',
                        f'{row["max_cpu_ms"]:.1f}',
                        f'{row["point_p50_ms"]:.2f}',
                        f'{row["point_p95_ms"]:.2f}',
                    )
                    # Progress on stderr: the whole table comes at the end.
                    print(
                        shape,
                        size,
                        window,
                        name,
                        {k: round(v, 1) for k, v in row.items()},
                        file=sys.stderr,
                        flush=True,
                    )
            del log, flat
            gc.unfreeze()
            gc.collect()
    if args.sizes:
        console.print(table)
    if args.adversarial_kb:
        gc.unfreeze()
        console.print(await adversarial_table(args.adversarial_kb, args.adversarial_window))
    if args.memory:
        gc.unfreeze()
        console.print(await memory_table(args.memory, names, windows, args.requests))
    return 0


def _text(message: ModelMessage) -> str:
    from pydantic_ai_context._parts import message_text

    return message_text(message)


if __name__ == '__main__':
    sys.exit(asyncio.run(main()))
