"""A session keeps the originals its markers name in its own store: a resumed session reads them back."""

from __future__ import annotations

from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import ContextSession, profile
from pydantic_ai_context._markers import ref_of
from pydantic_ai_context.readback import read_context
from pydantic_ai_context.session_readback import READBACK_NAMESPACE, StoreReadbackStore
from pydantic_ai_context.store import SqliteStore

from .realistic import read_file


def reading_model(run: int, reads: int) -> FunctionModel:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(
            1
            for m in messages
            for p in m.parts
            if getattr(p, 'tool_name', None) == 'read_file'
            and hasattr(p, 'args')
            and f'run{run}_' in str(p.args)
        )
        if done < reads:
            path = f'src/run{run}_module_{done:02d}.py'
            return ModelResponse(
                parts=[ToolCallPart('read_file', {'path': path}, tool_call_id=f'r{run}-{done}')]
            )
        return ModelResponse(parts=[TextPart(f'run {run} done')])

    return FunctionModel(model)


def markers(view: list[ModelMessage]) -> list[str]:
    refs: list[str] = []
    for message in view:
        for part in message.parts:
            ref = ref_of(part)
            if ref:
                refs.append(ref)
        ref = ref_of(message)
        if ref:
            refs.append(ref)
    return refs


async def test_a_resumed_session_reads_back_what_an_earlier_process_compacted(tmp_path: Path) -> None:
    path = tmp_path / 'sessions.db'
    ctx_profile = profile('coding', context_window=16_000)
    store = SqliteStore(path)
    session = ContextSession(ctx_profile, store=store, session_id='chat-1')
    agent = Agent(reading_model(1, 6), tools=[read_file])
    await session.run(agent, 'Read six modules.')
    agent = Agent(reading_model(2, 6), tools=[read_file])
    await session.run(agent, 'Read six more.')
    view = await session.messages_for_request()
    refs = markers(view)
    assert refs, 'the view compacted nothing: the test proves nothing'
    stored = await store.artifact_keys(READBACK_NAMESPACE, conversation_id='chat-1')
    assert stored, 'nothing was kept in the session store'
    await store.close()

    # Another process: a new store on the same file, a fresh profile, nothing compiled yet.
    store = SqliteStore(path)
    resumed = await ContextSession.open(store, 'chat-1', profile=profile('coding', context_window=16_000))
    side = resumed.profile.readback_store
    assert isinstance(side, StoreReadbackStore)
    assert all(side.get(key) is not None for key in stored)
    log = resumed.messages()
    for ref in refs:
        page = read_context(ref, log, resumed.profile.archive)
        assert page.startswith(f'[{ref}: ')
    await store.close()
