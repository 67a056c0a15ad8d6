"""A terminal chat on a pydantic-ai agent with `/compact`, `/clear`, `/history` and Ctrl-C handling.

Run it: `python examples/chat.py`. By default the agent runs on a small deterministic fake model
(a `FunctionModel`) that reads a large log file when asked about logs and runs a slow deploy when
asked to deploy (press Ctrl-C during it: the unanswered call gets a synthetic result, and the
chat goes on). Set `PYDANTIC_AI_CONTEXT_MODEL=openai:gpt-4o` (or any model name pydantic-ai
knows) to chat with a real model.

Commands: `/compact [focus]`, `/clear`, `/history`, `/sessions`, `/resume ID`, `/quit`; any other
line starting with `/` lists them (start a message with `//` to send it with one `/`). Lines are
read from stdin, so it also runs non-interactively: `printf 'hello\\n/history\\n' | python examples/chat.py`.

The conversation lives in a `ContextSession`. Without options it is kept in memory; with
`--session ID` (and `--db PATH`, default `.chat-sessions.db`) it is kept in a SQLite file and
resumed when you start the chat again with the same id. `/sessions` lists the stored sessions and
`/resume ID` switches to one (an id the store does not know is created only if you say so).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import ContextBudget, ContextProfile, MemoryStore, SessionStore, SqliteStore
from pydantic_ai_context.commands import compact_result, history_stats, patch_dangling_tool_calls
from pydantic_ai_context.overhead import RequestOverhead, agent_parameters, measure_overhead
from pydantic_ai_context.policies.summarize import summarize_window
from pydantic_ai_context.session import ContextSession

CONTEXT_WINDOW = 32_000
COMMANDS = '/compact [focus], /clear, /history, /sessions, /resume ID, /quit'


def plural(n: int, noun: str) -> str:
    """`1 user turn`, `2 user turns`."""
    return f'{n} {noun}' if n == 1 else f'{n} {noun}s'


def fake_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A deterministic stand-in for a provider model (also serves as the summariser)."""
    last = messages[-1]
    prompts = [p.content for p in last.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)]
    results = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    if prompts and '<transcript>' in prompts[-1]:
        turns = prompts[-1].count('\nuser: ') + prompts[-1].startswith('user: ')
        return ModelResponse(
            parts=[TextPart(f'Summary: {plural(turns, "user turn")} so far; the user chats about logs.')]
        )
    if results:
        lines = len(str(results[0].content).splitlines())
        return ModelResponse(parts=[TextPart(f'{results[0].tool_name} finished ({lines} lines of output).')])
    text = prompts[-1] if prompts else ''
    if 'log' in text.lower():
        return ModelResponse(parts=[ToolCallPart('read_log', {'path': '/var/log/app.log'})])
    if 'deploy' in text.lower():
        return ModelResponse(parts=[ToolCallPart('deploy', {'env': 'staging'})])
    return ModelResponse(parts=[TextPart(f'You said: {text}')])


def build_agent() -> tuple[Agent[None, str], Any, ContextProfile]:
    name = os.environ.get('PYDANTIC_AI_CONTEXT_MODEL')
    model: Any = name or FunctionModel(fake_model)
    profile = ContextProfile(
        name='chat-example',
        steps=[summarize_window(keep_current_run=True)],
        context_window=CONTEXT_WINDOW,
        summary_model=model,
    )
    # pydantic-ai 2.x: the profile is a capability and the history stays whole; 1.x: a history processor.
    integration: dict[str, Any] = (
        {'capabilities': [profile]}
        if 'capabilities' in inspect.signature(Agent.__init__).parameters
        else {'history_processors': profile.history_processors}
    )
    agent: Agent[None, str] = Agent(model, output_type=str, **integration)

    @agent.tool_plain
    def read_log(path: str) -> str:
        """Read a log file."""
        return '\n'.join(f'{path}:{i}: INFO request served in {i % 97} ms' for i in range(400))

    @agent.tool_plain
    async def deploy(env: str) -> str:
        """Deploy the application (slow)."""
        # Announced from the event loop once this coroutine is parked in the wait: by the time the
        # line is out, Ctrl-C (or a test's SIGINT) interrupts the wait itself.
        announce = functools.partial(print, f'deploying to {env}... (Ctrl-C to interrupt)', flush=True)
        asyncio.get_running_loop().call_soon(announce)
        await asyncio.sleep(float(os.environ.get('CHAT_DEPLOY_SECONDS', '20')))
        return f'deployed to {env}'

    return agent, model, profile


async def turn(
    agent: Agent[None, str], prompt: str, history: list[ModelMessage], new: list[ModelMessage]
) -> str:
    """One user turn; `new` is kept up to date so an interrupt does not lose the partial run.

    Only the run's new messages are collected: on pydantic-ai 1.x the compiled view replaces the
    run's own history, but the session keeps the whole log.
    """
    async with agent.iter(prompt, message_history=history) as run:
        async for _node in run:
            new[:] = run.new_messages()
        new[:] = run.new_messages()
        assert run.result is not None
        return str(run.result.output)


def after_interrupt(partial: list[ModelMessage]) -> list[ModelMessage]:
    """The history to continue from after Ctrl-C: every call answered, ending with a response."""
    history = patch_dangling_tool_calls(partial, note='Interrupted by the user (Ctrl-C).')
    if history and isinstance(history[-1], ModelRequest):
        history.append(ModelResponse(parts=[TextPart('(interrupted)')]))
    return history


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='A terminal chat with context management and sessions.')
    parser.add_argument('--session', metavar='ID', help='keep the chat in the SQLite file under this id')
    parser.add_argument(
        '--db',
        metavar='PATH',
        help='the SQLite file for --session, /sessions, /resume (default .chat-sessions.db)',
    )
    return parser.parse_args(argv)


def open_store(args: argparse.Namespace) -> SessionStore:
    if args.session is None and args.db is None:
        return MemoryStore()
    return SqliteStore(args.db or '.chat-sessions.db')


def list_sessions(store: SessionStore, current: str) -> str:
    infos = asyncio.run(store.sessions())
    if not infos:
        return 'no stored sessions'
    return '\n'.join(
        f'{"*" if i.session_id == current else " "} {i.session_id}: {plural(i.message_count, "message")}, '
        f'updated {i.updated_at:%Y-%m-%d %H:%M:%S} UTC'
        for i in infos
    )


def stored_ids(store: SessionStore) -> list[str]:
    return [i.session_id for i in asyncio.run(store.sessions())]


def resume(
    store: SessionStore, session: ContextSession, session_id: str, lines: Iterator[str]
) -> ContextSession:
    """`/resume ID`: switch to a stored session; an unknown id is created only when the user says yes."""
    known = stored_ids(store)
    if session_id != session.session_id and session_id not in known:
        stored = f' (stored: {", ".join(known)})' if known else ''
        print(f'no stored session {session_id!r}{stored}. Create it? [y/N]', flush=True)
        answer = next(lines, '').strip().lower()
        if answer not in {'y', 'yes'}:
            print(f'staying in session {session.session_id}', flush=True)
            return session
        print(f'new session {session_id}', flush=True)
        return asyncio.run(ContextSession.open(store, session_id))
    resumed = asyncio.run(ContextSession.open(store, session_id))
    print(f'resumed {session_id} ({plural(len(resumed), "message")})', flush=True)
    return resumed


def agent_overhead(agent: Agent[None, str], profile: ContextProfile) -> RequestOverhead:
    """What every request of `agent` sends besides its messages (tool definitions, instructions).

    Measured once at start by preparing a request without calling the model: a resumed session
    has made no request in this process yet, so the profile has measured nothing.
    """
    return measure_overhead([], counter=profile.counter_for(None), parameters=agent_parameters(agent))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    agent, model, ctx_profile = build_agent()
    at_start = agent_overhead(agent, ctx_profile)
    budget = ContextBudget(context_window=CONTEXT_WINDOW)
    store = open_store(args)
    session = (
        asyncio.run(ContextSession.open(store, args.session))
        if args.session is not None
        else ContextSession(store=store)
    )
    print(f'chat: {COMMANDS}', flush=True)
    if args.session is not None:
        print(f'session {session.session_id} ({plural(len(session), "message")})', flush=True)
    lines = (raw.strip() for raw in sys.stdin)
    for line in lines:
        if not line:
            continue
        command, _, argument = line.partition(' ')
        argument = argument.strip()
        if line.startswith('//'):
            command, line = '', line[1:]  # a message that starts with '/'
        if command in {'/quit', '/exit'}:
            break
        if command == '/clear':
            asyncio.run(session.clear())
            print('history cleared', flush=True)
        elif command == '/history':
            # The agent's profile measured what its requests send besides messages (tool definitions).
            # Before this process's first request (a resumed session), the overhead measured at start.
            overhead = ctx_profile.last_overhead or at_start
            stats = history_stats(session.messages(), budget=budget, overhead=overhead)
            print(stats, flush=True)
        elif command == '/sessions':
            print(list_sessions(store, session.session_id), flush=True)
        elif command == '/resume':
            if not argument:
                print('usage: /resume ID', flush=True)
                continue
            session = resume(store, session, argument, lines)
        elif command == '/compact':
            focus = argument or None
            result = asyncio.run(compact_result(session.messages(), model=model, focus=focus))
            if result.compacted:
                # An explicit /compact is the one place the stored log itself is replaced.
                asyncio.run(session.set_messages(result.messages))
                print(f'compacted: {result.tokens_before:,} -> {result.tokens_after:,} tokens', flush=True)
            else:
                print(f'not compacted: {result.reason}', flush=True)
        elif command.startswith('/'):
            # A typo must not reach the model as a message.
            print(f'unknown command {command}; commands: {COMMANDS}', flush=True)
        else:
            history = session.messages()
            new: list[ModelMessage] = []
            try:
                answer = asyncio.run(turn(agent, line, history, new))
            except KeyboardInterrupt:
                patched = after_interrupt([*history, *new])
                asyncio.run(session.add_messages(patched[len(history) :]))
                print('interrupted; unanswered tool calls were closed', flush=True)
                continue
            asyncio.run(session.add_messages(new))
            print(f'assistant: {answer}', flush=True)
    asyncio.run(store.close())
    print('bye', flush=True)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
