"""Generate the synthetic held-out runs in `bench/heldout/` (deterministic: seeded).

The presets' defaults are tuned by replaying the six recorded runs in `tests/data/trajectories`.
To check that they are not fitted to those six, `bench/replay.py bench/heldout` replays runs of a
different shape. No third-party recorded runs could be brought in from this workplace (see
`bench/heldout/SOURCE.md`), so these are synthetic, built to differ from the shared runs in agent
style and output sizes:

- `synthetic_classic_sweagent.json`: a classic SWE-agent style run: text commands (`open`,
  `scroll_down`, `search_dir`, `edit`, `python`) with a windowed file viewer (100 lines a view and a
  `(Open file: ...)` footer), a long in-context demonstration in the first request, 70 steps;
- `synthetic_chat_multi_turn.json`: a pair-programming chat (aider style): 9 user turns, each a run
  of 1-5 tool steps (whole-file reads of 2-4k tokens, diffs, test runs) and an answer, run ids stamped;
- `synthetic_browser_large_pages.json`: a browsing agent whose page snapshots are 6-10k tokens each,
  40 steps, with navigation errors;
- `synthetic_many_small_steps.json`: 220 steps of small shell outputs (`grep`, `ls`, `sed -n`),
  tens of tokens each, with an occasional failing test run.

Usage: `python tools/make_heldout.py [OUT_DIR]` (default `bench/heldout`).
"""

# ruff: noqa: E501  (long literal lines of generated content read better unwrapped)
from __future__ import annotations

import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

OUT = Path(__file__).resolve().parents[1] / 'bench' / 'heldout'
START = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)

PACKAGES = ['core', 'io', 'utils', 'models', 'api', 'cli', 'storage', 'auth', 'render', 'config']
WORDS = [
    'value',
    'result',
    'item',
    'data',
    'config',
    'path',
    'handler',
    'request',
    'response',
    'cache',
    'index',
    'node',
    'buffer',
    'stream',
    'record',
    'field',
    'schema',
    'token',
    'parser',
    'writer',
    'reader',
    'session',
    'client',
    'server',
    'state',
    'event',
]


class Run:
    """Builds one history with deterministic timestamps and call ids."""

    def __init__(self, seed: int, run_id: str | None = None) -> None:
        self.rng = random.Random(seed)
        self.messages: list[ModelMessage] = []
        self.clock = START
        self.calls = 0
        self.run_id = run_id

    def tick(self) -> datetime:
        self.clock += timedelta(seconds=self.rng.randint(2, 40))
        return self.clock

    def ids(self) -> dict[str, str]:
        return {'run_id': self.run_id} if self.run_id else {}

    def request(self, *parts: object) -> None:
        self.messages.append(ModelRequest(parts=list(parts), **self.ids()))  # type: ignore[arg-type]

    def step(self, tool: str, args: dict[str, object], output: str, *, thought: str | None = None) -> None:
        self.calls += 1
        call_id = f'call_{self.calls:04d}'
        parts: list[object] = []
        if thought:
            parts.append(TextPart(thought))
        parts.append(ToolCallPart(tool, args, tool_call_id=call_id))
        self.messages.append(ModelResponse(parts=parts, timestamp=self.tick(), **self.ids()))  # type: ignore[arg-type]
        self.request(ToolReturnPart(tool, output, tool_call_id=call_id, timestamp=self.tick()))

    def answer(self, text: str) -> None:
        self.messages.append(ModelResponse(parts=[TextPart(text)], timestamp=self.tick(), **self.ids()))

    # --- content ---------------------------------------------------------------------------

    def path(self, root: str = 'src/project') -> str:
        pkg = self.rng.choice(PACKAGES)
        return f'{root}/{pkg}/{self.rng.choice(WORDS)}_{self.rng.randint(1, 40)}.py'

    def code_lines(self, path: str, start: int, n: int) -> list[str]:
        lines = []
        for i in range(start, start + n):
            w1, w2 = self.rng.choice(WORDS), self.rng.choice(WORDS)
            kind = self.rng.random()
            if kind < 0.15:
                lines.append(f'{i}:def {w1}_{w2}(self, {w2}: int = {i}) -> {w1.title()}:')
            elif kind < 0.25:
                lines.append(f'{i}:    """Return the {w1} of the {w2} ({path})."""')
            elif kind < 0.3:
                lines.append(f'{i}:from {path[:-3].replace("/", ".")} import {w1.title()}{w2.title()}')
            else:
                lines.append(f'{i}:        {w1} = self.{w2}.get({w1!r}, {self.rng.randint(0, 99)})')
        return lines

    def pytest_log(self, target: str, *, failing: bool) -> str:
        lines = [
            '============ test session starts ============',
            f'collected {self.rng.randint(20, 90)} items',
            '',
        ]
        for k in range(self.rng.randint(15, 60)):
            lines.append(f'{target}::test_{self.rng.choice(WORDS)}_{k} PASSED')
        if failing:
            name = f'test_{self.rng.choice(WORDS)}_edge'
            lines += [
                '',
                '================= FAILURES =================',
                f'___________ {name} ___________',
                'Traceback (most recent call last):',
                f'  File "{self.path()}", line {self.rng.randint(10, 400)}, in {self.rng.choice(WORDS)}',
                f'AssertionError: expected {self.rng.randint(0, 9)}, got {self.rng.randint(10, 99)}',
                f'FAILED {target}::{name} - AssertionError',
                '1 failed',
            ]
        else:
            lines.append('all passed')
        return '\n'.join(lines)


def classic_sweagent() -> list[ModelMessage]:
    run = Run(101)
    demo = '\n'.join(
        [
            'Here is a demonstration of how to correctly accomplish this task.',
            'It is included to show you how to correctly use the interface.',
            *(f'> {line}' for line in run.code_lines('demo/marshmallow/fields.py', 1, 150)),
        ]
    )
    run.request(
        SystemPromptPart(
            'SETTING: You are an autonomous programmer working directly in the command line with a special '
            'interface. The special interface consists of a file editor that shows you 100 lines of a file '
            'at a time. COMMANDS: open <path> [<line>], goto <line>, scroll_down, scroll_up, '
            'search_dir <term> [<dir>], search_file <term> [<file>], find_file <name> [<dir>], '
            'edit <start>:<end> <replacement> end_of_edit, create <file>, submit.',
            timestamp=START,
        ),
        UserPromptPart(demo, timestamp=START),
        UserPromptPart(
            'We are currently solving the following issue within our repository: serializing a '
            'TimeDelta with millisecond precision rounds down instead of to the nearest value. '
            'Now, you are going to solve this issue on your own.',
            timestamp=START,
        ),
    )
    current = run.path()
    for _i in range(70):
        kind = run.rng.random()
        footer = f'\n(Open file: /repo/{current})\n(Current directory: /repo)\nbash-$'
        if kind < 0.35:
            current = run.path()
            start = run.rng.randint(1, 900)
            body = '\n'.join(run.code_lines(current, start, 100))
            out = f'[File: /repo/{current} ({run.rng.randint(900, 2400)} lines total)]\n({start - 1} more lines above)\n{body}{footer}'
            run.step(
                'open', {'command': f'open {current} {start}'}, out, thought=f'Let me look at {current}.'
            )
        elif kind < 0.55:
            body = '\n'.join(run.code_lines(current, run.rng.randint(100, 900), 100))
            run.step('scroll_down', {'command': 'scroll_down'}, f'[File: /repo/{current}]\n{body}{footer}')
        elif kind < 0.7:
            term = run.rng.choice(WORDS)
            hits = '\n'.join(
                f'/repo/{run.path()} (Line {run.rng.randint(1, 500)})' for _ in range(run.rng.randint(3, 25))
            )
            run.step(
                'search_dir',
                {'command': f'search_dir {term} src'},
                f'Found matches for "{term}" in /repo/src:\n{hits}\nEnd of matches for "{term}"{footer}',
            )
        elif kind < 0.85:
            start = run.rng.randint(10, 500)
            body = '\n'.join(run.code_lines(current, start, 40))
            run.step(
                'edit',
                {
                    'command': f'edit {start}:{start + 3}\n'
                    + '\n'.join(run.code_lines(current, start, 4))
                    + '\nend_of_edit'
                },
                f'[File: /repo/{current}]\n{body}\nFile updated. Please review the changes.{footer}',
            )
        else:
            target = f'tests/test_{run.rng.choice(WORDS)}.py'
            run.step(
                'python',
                {'command': f'python -m pytest {target}'},
                run.pytest_log(target, failing=run.rng.random() < 0.5) + footer,
            )
    run.step(
        'submit',
        {'command': 'submit'},
        'diff --git a/src/project/core/fields.py b/src/project/core/fields.py\n+        return int(round(value))',
    )
    return run.messages


def chat_multi_turn() -> list[ModelMessage]:
    messages: list[ModelMessage] = []
    clock_seed = 202
    asks = [
        'Add a --dry-run flag to the sync command.',
        'The tests for the storage layer fail on Windows paths, can you look?',
        'Rename Handler to RequestHandler everywhere.',
        'Why is the cache never invalidated after a config reload?',
        'Write a migration for the new session table.',
        'Make the CLI print a summary table at the end.',
        'Bump the minimum Python to 3.11 and clean up the compat shims.',
        'Add type hints to the api package.',
        'Summarise what we changed today.',
    ]
    for turn, ask in enumerate(asks):
        run = Run(clock_seed + turn, run_id=f'chat-run-{turn}')
        run.clock = START + timedelta(minutes=20 * turn)
        run.calls = 100 * turn
        parts: list[object] = [UserPromptPart(ask, timestamp=START)]
        if turn == 0:
            parts.insert(
                0,
                SystemPromptPart(
                    'You are a pair programmer. Edit files with whole-file writes; run the tests.',
                    timestamp=START,
                ),
            )
        run.request(*parts)
        for _ in range(run.rng.randint(1, 5)):
            choice = run.rng.random()
            path = run.path()
            if choice < 0.45:
                body = '\n'.join(run.code_lines(path, 1, run.rng.randint(180, 320)))
                run.step('read_file', {'path': path}, f'{path}\n```\n{body}\n```')
            elif choice < 0.7:
                diff = '\n'.join(
                    f'+{line}'
                    for line in run.code_lines(path, run.rng.randint(1, 200), run.rng.randint(10, 40))
                )
                run.step('write_file', {'path': path, 'content': diff}, f'Applied edit to {path}')
            else:
                target = f'tests/test_{run.rng.choice(WORDS)}.py'
                run.step(
                    'run_tests', {'target': target}, run.pytest_log(target, failing=run.rng.random() < 0.4)
                )
        run.answer(f'Done: {ask.lower()} I changed {run.path()} and {run.path()}; the tests pass.')
        messages.extend(run.messages)
    return messages


def browser_large_pages() -> list[ModelMessage]:
    run = Run(303)
    run.request(
        SystemPromptPart('You are a web agent. Use the browser tools to complete the task.', timestamp=START),
        UserPromptPart(
            'Find the quarterly revenue figures for the three largest vendors in the procurement portal and compare them.',
            timestamp=START,
        ),
    )
    for i in range(40):
        url = f'https://portal.example.com/{run.rng.choice(WORDS)}/{run.rng.randint(1, 999)}'
        if run.rng.random() < 0.12:
            run.step('navigate', {'url': url}, f'Error: net::ERR_CONNECTION_RESET while loading {url}')
            continue
        rows = []
        for k in range(run.rng.randint(350, 600)):
            w = run.rng.choice(WORDS)
            rows.append(
                f'[{k}] {run.rng.choice(["link", "button", "cell", "text"])} "{w.title()} {run.rng.randint(1, 9999)}" href=/docs/{w}/{k}.html'
            )
        tool = 'click' if i % 3 else 'navigate'
        args = {'url': url} if tool == 'navigate' else {'element': run.rng.randint(1, 400)}
        run.step(tool, args, f'Page: {url}\nAccessibility tree:\n' + '\n'.join(rows))
    run.answer('Vendor A: 4.2M, Vendor B: 3.9M, Vendor C: 3.1M for Q2.')
    return run.messages


def many_small_steps() -> list[ModelMessage]:
    run = Run(404)
    run.request(
        UserPromptPart(
            'Find every place that still calls the deprecated load_config() and migrate it to Config.load().',
            timestamp=START,
        )
    )
    for _i in range(220):
        kind = run.rng.random()
        if kind < 0.4:
            hits = '\n'.join(
                f'{run.path()}:{run.rng.randint(1, 300)}: cfg = load_config()'
                for _ in range(run.rng.randint(0, 4))
            )
            run.step(
                'bash', {'command': f'grep -rn load_config {run.rng.choice(PACKAGES)}'}, hits or '(no output)'
            )
        elif kind < 0.6:
            run.step(
                'bash',
                {'command': f'ls src/project/{run.rng.choice(PACKAGES)}'},
                '  '.join(f'{run.rng.choice(WORDS)}_{k}.py' for k in range(run.rng.randint(3, 12))),
            )
        elif kind < 0.85:
            path = run.path()
            start = run.rng.randint(1, 300)
            run.step(
                'bash',
                {'command': f"sed -n '{start},{start + 8}p' {path}"},
                '\n'.join(run.code_lines(path, start, 8)),
            )
        elif kind < 0.95:
            path = run.path()
            run.step('bash', {'command': f"sed -i 's/load_config()/Config.load()/' {path}"}, '')
        else:
            target = f'tests/test_{run.rng.choice(WORDS)}.py'
            out = run.pytest_log(target, failing=True).splitlines()
            run.step('bash', {'command': f'pytest -q {target}'}, '\n'.join(out[-6:]))
    run.answer('Migrated every call site; the remaining failures are unrelated.')
    return run.messages


RUNS = {
    'synthetic_classic_sweagent': classic_sweagent,
    'synthetic_chat_multi_turn': chat_multi_turn,
    'synthetic_browser_large_pages': browser_large_pages,
    'synthetic_many_small_steps': many_small_steps,
}


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else OUT
    out.mkdir(parents=True, exist_ok=True)
    for name, build in RUNS.items():
        messages = build()
        (out / f'{name}.json').write_bytes(ModelMessagesTypeAdapter.dump_json(messages))
        print(f'{name}: {len(messages)} messages')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
