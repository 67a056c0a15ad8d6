"""Worker processes for the conversation-store tests: concurrent writers, a writer killed mid-loop, a resumed session.

Usage:
- `python tests/_conversation_worker.py share URL WORKERS RUNS OUTDIR`: imports once, then forks
  `WORKERS` writer processes; writer `w` makes `RUNS` runs on conversation `own-w`, each followed
  by one on the conversation `shared` (retrying on `ConversationConflict`), and writes one JSON
  line per acknowledged save to `OUTDIR/w.jsonl`. Exits non-zero if a writer failed.
- `python tests/_conversation_worker.py crash URL`: imports once, prints `ready`, then forks one
  writer per stdin line `go OUTFILE` (prints `pid N`, then `reaped` once the test killed it).
  The writer loops: load `crash`, run turn `n` (n = turns stored so far), save, and append `n` to
  OUTFILE once the save returned.
- `python tests/_conversation_worker.py summarise URL SESSION`: opens the session, compiles its
  view with a summarising profile and prints the number of summariser calls made.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

# A Conversation carries its accumulated usage, and every run checks the limits against it.
NO_LIMITS = UsageLimits(request_limit=None)


def prompt_of(message: ModelMessage) -> str | None:
    if isinstance(message, ModelRequest):
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                return part.content
    return None


def echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Answers `ack <prompt>` and says how many messages it saw, so a run proves which history it had."""
    prompt = next((p for m in reversed(messages) if (p := prompt_of(m)) is not None), '?')
    return ModelResponse(parts=[TextPart(f'ack {prompt} after {len(messages) - 1}')])


def echo_agent() -> Agent[None, str]:
    return Agent(FunctionModel(echo), output_type=str)


def summarising_profile(calls: list[int]) -> Any:
    """A profile that summarises all but the last 4 of more than 8 messages; `calls` counts summariser calls."""
    from pydantic_ai_context import ContextProfile, HeuristicCounter
    from pydantic_ai_context.policies.summarize import summarize_window

    def summariser(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        return ModelResponse(parts=[TextPart(f'summary #{len(calls)}')])

    step = summarize_window(
        trigger='messages',
        max_messages=8,
        keep_messages=4,
        step_messages=2,
        keep_current_run=False,
        summary_model=FunctionModel(summariser),
    )
    return ContextProfile(name='summarising', steps=[step], counter=HeuristicCounter(), context_window=32_000)


def long_chat(turns: int = 10) -> list[ModelMessage]:
    messages: list[ModelMessage] = []
    for i in range(turns):
        messages.append(ModelRequest(parts=[UserPromptPart(f'question {i} ' + 'detail ' * 40)]))
        messages.append(ModelResponse(parts=[TextPart(f'answer {i} ' + 'words ' * 40)]))
    messages.append(ModelRequest(parts=[UserPromptPart('and finally?')]))
    return messages


async def _share(url: str, worker: int, runs: int, out: Any) -> None:
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import ConversationConflict

    from pydantic_ai_context import open_store

    agent = echo_agent()
    options: dict[str, Any] = {'max_size': 2} if url.startswith('postgresql') else {}
    async with open_store(url, **options) as store:
        for i in range(runs):
            for cid in (f'own-{worker}', 'shared'):
                label = f'w{worker}-{cid}-{i}'
                conflicts = 0
                while True:
                    conversation = await store.load(cid) or Conversation(conversation_id=cid)
                    result = await agent.run(label, conversation=conversation, usage_limits=NO_LIMITS)
                    try:
                        await store.save(result)
                    except ConversationConflict:
                        conflicts += 1
                        continue
                    break
                print(
                    json.dumps({'conversation': cid, 'label': label, 'conflicts': conflicts}),
                    file=out,
                    flush=True,
                )


async def _write_forever(url: str, out: Any) -> None:
    from pydantic_ai.conversation import Conversation

    from pydantic_ai_context import open_store

    agent = echo_agent()
    store = open_store(url)
    while True:
        conversation = await store.load('crash') or Conversation(conversation_id='crash')
        turn = len(conversation.messages) // 2
        result = await agent.run(f'turn {turn}', conversation=conversation, usage_limits=NO_LIMITS)
        await store.save(result)
        # one write(2) per line: once it returns, the line survives this process being killed
        print(turn, file=out, flush=True)


def _warm_up() -> None:
    """Import and build everything once in the parent, so each forked writer starts saving at once."""
    import pydantic_ai_context.store  # noqa: F401
    from pydantic_ai_context.store import _codec

    result = asyncio.run(echo_agent().run('warm up', usage_limits=NO_LIMITS))
    for message in result.all_messages():
        _codec.load_message(_codec.dump_message(message))
    assert threading.active_count() == 1  # fork is only safe while this process has no other threads


def _share_all(url: str, workers: int, runs: int, outdir: str) -> int:
    _warm_up()
    pids = []
    for w in range(workers):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                with open(os.path.join(outdir, f'{w}.jsonl'), 'w') as out:
                    asyncio.run(_share(url, w, runs, out))
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    return max(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0 for pid in pids)


def _crash(url: str) -> None:
    _warm_up()
    print('ready', flush=True)
    for line in sys.stdin:
        _, outfile = line.split()
        pid = os.fork()
        if pid == 0:
            with open(outfile, 'w') as out:
                asyncio.run(_write_forever(url, out))
            os._exit(0)
        print(f'pid {pid}', flush=True)
        os.waitpid(pid, 0)
        print('reaped', flush=True)


async def _summarise(url: str, session_id: str) -> None:
    from pydantic_ai_context import open_store
    from pydantic_ai_context.session import ContextSession

    calls: list[int] = []
    async with open_store(url) as store:
        session = await ContextSession.open(store, session_id, profile=summarising_profile(calls))
        if not session.messages():
            await session.add_messages(long_chat())
        await session.messages_for_request()
    print(len(calls), flush=True)


def main() -> None:
    mode, url, *rest = sys.argv[1:]
    if mode == 'share':
        raise SystemExit(_share_all(url, int(rest[0]), int(rest[1]), rest[2]))
    if mode == 'crash':
        _crash(url)
    elif mode == 'summarise':
        asyncio.run(_summarise(url, rest[0]))
    else:
        raise SystemExit(f'unknown mode {mode!r}')


if __name__ == '__main__':
    main()
