"""Conformance: one script of operations on pydantic-ai's `InMemoryConversationStore` and on each of ours.

The reference is pydantic-ai's own in-memory store, untouched. The script drives every part of the
`ConversationStore` contract a production user reaches (save, load with limits, rewritten
histories, branch, fork, scope, delete, revision conflicts, `read_history`, empty conversations,
large, unicode and binary messages, usage and deferred tool requests on the record) and records
what each call returns or raises; entry ids and revisions, minted per store, are compared by the
order they first appear in. Every backend must record exactly what the reference records.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from pydantic_ai_context.store._compat import HAS_CONVERSATION_STORE

pytestmark = pytest.mark.skipif(not HAS_CONVERSATION_STORE, reason='needs pydantic-ai 2.66+')

if HAS_CONVERSATION_STORE:
    from pydantic_ai import DeferredToolRequests
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import (
        ConversationEntry,
        ConversationRecord,
        ConversationStore,
        InMemoryConversationStore,
    )
    from pydantic_ai.messages import (
        BinaryContent,
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.usage import RunUsage

    from pydantic_ai_context import open_store

T0 = datetime.datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC)
PNG = b'\x89PNG\r\n\x1a\n' + bytes(range(256)) * 4


def ask(text: str | list[Any]) -> ModelMessage:
    return ModelRequest(parts=[UserPromptPart(text, timestamp=T0)], timestamp=T0)


def say(text: str) -> ModelMessage:
    return ModelResponse(parts=[TextPart(text)], timestamp=T0, model_name='m')


def call(tool: str, args: dict[str, Any], call_id: str) -> ModelMessage:
    return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=call_id)], timestamp=T0)


def returned(tool: str, content: Any, call_id: str) -> ModelMessage:
    return ModelRequest(
        parts=[ToolReturnPart(tool, content, tool_call_id=call_id, timestamp=T0)], timestamp=T0
    )


class Observer:
    """Turns what a store returns into plain data, naming entry ids and revisions by first appearance."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def name(self, value: str | None, prefix: str) -> str | None:
        if value is None:
            return None
        return self.names.setdefault(
            value, f'{prefix}{sum(n.startswith(prefix) for n in self.names.values())}'
        )

    def message(self, message: ModelMessage) -> Any:
        # JSON for the content, and the part classes: a store must give back what it was given.
        return (
            ModelMessagesTypeAdapter.dump_json([message]).decode(),
            [type(part).__name__ for part in message.parts],
            [
                [type(c).__name__ for c in part.content]
                if isinstance(part.content, list)
                else type(part.content).__name__
                for part in message.parts
                if hasattr(part, 'content')
            ],
        )

    def entry(self, entry: ConversationEntry) -> Any:
        return (
            self.name(entry.id, 'e'),
            self.name(entry.parent_id, 'e'),
            entry.kind,
            self.message(entry.message),
        )

    def conversation(self, conversation: Conversation | None) -> Any:
        if conversation is None:
            return None
        return {
            'id': conversation.conversation_id,
            'messages': [self.message(m) for m in conversation.messages],
            'usage': conversation.usage,
            'deferred': conversation.deferred_tool_requests,
            'revision': self.name(conversation.revision, 'r'),
            'new_message_index': conversation.new_message_index,
        }

    def record(self, record: ConversationRecord) -> Any:
        return {
            'id': record.conversation_id,
            'head': self.name(record.head_id, 'e'),
            'scope': record.scope,
            'usage': record.usage,
            'deferred': record.deferred_tool_requests,
            'forked_from': record.forked_from,
            'forked_at': self.name(record.forked_at, 'e'),
            'branches': [self.name(b, 'e') for b in record.branches],
            'revision': self.name(record.revision, 'r'),
            'format_version': record.format_version,
        }


Step = Callable[['Script'], Awaitable[Any]]


class Script:
    """The state one run of the script keeps: the store, the observer, and conversations held across steps."""

    def __init__(self, store: ConversationStore) -> None:
        self.store = store
        self.obs = Observer()
        self.held: dict[str, Conversation] = {}
        self.entries: dict[str, str] = {}  # names -> real entry ids, for from_entry

    def real(self, name: str) -> str:
        return next(real for real, n in self.obs.names.items() if n == name)

    async def turn(
        self, cid: str, *messages: ModelMessage, scope: str | None = None, hold: str | None = None
    ) -> Any:
        conversation = await self.store.load(cid, scope=scope) or Conversation(conversation_id=cid)
        conversation.messages.extend(messages)
        saved = await self.store.save(conversation, scope=scope)
        if hold:
            self.held[hold] = conversation
        return [self.obs.entry(e) for e in saved], self.obs.conversation(conversation)

    async def snapshot(self) -> Any:
        state = []
        for record in await self.store.list_conversations():
            state.append(self.obs.record(record))
            for tip in [record.head_id, *record.branches]:
                state.append([self.obs.entry(e) for e in await self.store.read_history(tip)])
        for scope in ('alice', 'bob', 'nobody'):
            state.append([r.conversation_id for r in await self.store.list_conversations(scope=scope)])
        state.append([r.conversation_id for r in await self.store.list_conversations(limit=2)])
        return state


def outcome(exc: BaseException) -> Any:
    # The exception's class family and message: the same mistake must fail the same way.
    if isinstance(exc, LookupError):
        return ('LookupError',)
    return (type(exc).__name__, str(exc))


def steps() -> list[tuple[str, Step]]:
    big = 'x' * 3_000_000
    uni = 'héllo wörld 🌍🏳️‍🌈 עברית العربية 中文 \u200b\u0301e \\ " \n\t \u2028 nul:\u0000 end'

    out: list[tuple[str, Step]] = []

    def step(name: str) -> Callable[[Step], Step]:
        def add(fn: Step) -> Step:
            out.append((name, fn))
            return fn

        return add

    @step('load missing')
    async def _(sc: Script) -> Any:
        return sc.obs.conversation(await sc.store.load('a')), await sc.store.load_entries('a')

    @step('save new, two messages')
    async def _(sc: Script) -> Any:
        return await sc.turn('a', ask('one'), say('ack one'), hold='a0')

    @step('save again with nothing new')
    async def _(sc: Script) -> Any:
        saved = await sc.store.save(sc.held['a0'])
        return [sc.obs.entry(e) for e in saved], sc.obs.conversation(sc.held['a0'])

    @step('append a tool step')
    async def _(sc: Script) -> Any:
        return await sc.turn(
            'a',
            ask('two'),
            call('read', {'path': 'a.py', 'n': [1, 2.5, None, True]}, 'c1'),
            returned('read', {'text': uni, 'lines': 3}, 'c1'),
            say('ack two'),
        )

    @step('load with limits')
    async def _(sc: Script) -> Any:
        out = [sc.obs.conversation(await sc.store.load('a', limit=n)) for n in (0, 1, 3, 6, 100)]
        return out, [sc.obs.entry(e) for e in await sc.store.load_entries('a', limit=2) or []]

    @step('negative limit')
    async def _(sc: Script) -> Any:
        return await sc.store.load('a', limit=-1)

    @step('windowed load, then save appends')
    async def _(sc: Script) -> Any:
        window = await sc.store.load('a', limit=2)
        assert window is not None
        window.messages.append(ask('three'))
        saved = await sc.store.save(window)
        return [sc.obs.entry(e) for e in saved], sc.obs.conversation(await sc.store.load('a'))

    @step('stale revision conflicts')
    async def _(sc: Script) -> Any:
        stale = sc.held['a0']
        stale.messages.append(ask('late'))
        return await sc.store.save(stale)

    @step('a new conversation under a taken id conflicts')
    async def _(sc: Script) -> Any:
        return await sc.store.save(Conversation(conversation_id='a', messages=[ask('one')]))

    @step('a rewritten history branches off the last shared entry')
    async def _(sc: Script) -> Any:
        loaded = await sc.store.load('a')
        assert loaded is not None
        edited = Conversation(
            messages=[*loaded.messages[:3], say('rewritten'), ask('after')],
            conversation_id='a',
            revision=loaded.revision,
        )
        saved = await sc.store.save(edited)
        return [sc.obs.entry(e) for e in saved], await sc.snapshot()

    @step('a history rewritten from the first message')
    async def _(sc: Script) -> Any:
        loaded = await sc.store.load('a')
        assert loaded is not None
        saved = await sc.store.save(
            Conversation(messages=[ask('fresh start')], conversation_id='a', revision=loaded.revision)
        )
        return [sc.obs.entry(e) for e in saved], await sc.snapshot()

    @step('a rewrite inside the window new_message_index names')
    async def _(sc: Script) -> Any:
        loaded = await sc.store.load('a')
        assert loaded is not None
        window = Conversation(
            messages=[ask('fresh start'), say('reply'), ask('next')],
            conversation_id='a',
            revision=loaded.revision,
            new_message_index=1,
        )
        saved = await sc.store.save(window)
        return [sc.obs.entry(e) for e in saved], await sc.snapshot()

    @step('branch back to the first branch')
    async def _(sc: Script) -> Any:
        record = (await sc.store.list_conversations())[0]
        loaded = await sc.store.load('a')
        assert loaded is not None
        back = await sc.store.branch('a', from_entry=record.branches[0], expected_revision=loaded.revision)
        return sc.obs.conversation(back), await sc.snapshot()

    @step('branch at 1, then a turn on it')
    async def _(sc: Script) -> Any:
        loaded = await sc.store.load('a')
        assert loaded is not None
        branched = await sc.store.branch('a', at=1, expected_revision=loaded.revision)
        branched.messages.append(say('on the branch'))
        saved = await sc.store.save(branched)
        return sc.obs.conversation(branched), [sc.obs.entry(e) for e in saved], await sc.snapshot()

    @step('branch at 0')
    async def _(sc: Script) -> Any:
        loaded = await sc.store.load('a')
        assert loaded is not None
        return sc.obs.conversation(await sc.store.branch('a', at=0, expected_revision=loaded.revision))

    @step('branch to the current head changes nothing but the revision')
    async def _(sc: Script) -> Any:
        loaded = await sc.store.load('a')
        assert loaded is not None
        return sc.obs.conversation(await sc.store.branch('a', at=0, expected_revision=loaded.revision))

    @step('branch mistakes')
    async def _(sc: Script) -> Any:
        loaded = await sc.store.load('a')
        assert loaded is not None
        results = []
        for kwargs in (
            {'at': 99},
            {'at': -1},
            {'at': 0, 'from_entry': 'x'},
            {},
            {'from_entry': 'not-an-entry'},
        ):
            try:
                await sc.store.branch('a', expected_revision=loaded.revision, **kwargs)
            except Exception as e:
                results.append(outcome(e))
        try:
            await sc.store.branch('a', at=0, expected_revision='stale')
        except Exception as e:
            results.append(outcome(e))
        try:
            await sc.store.branch('missing', at=0, expected_revision=None)
        except Exception as e:
            results.append(outcome(e))
        return results

    @step('restore a whole history, then fork it')
    async def _(sc: Script) -> Any:
        loaded = await sc.store.load('a')
        record = (await sc.store.list_conversations())[0]
        assert loaded is not None
        await sc.store.branch('a', from_entry=record.branches[0], expected_revision=loaded.revision)
        whole = await sc.store.fork('a', new_conversation_id='f-whole')
        part = await sc.store.fork('a', at=2, new_conversation_id='f-part', scope='bob')
        empty = await sc.store.fork('a', at=0, new_conversation_id='f-empty')
        from_branch = await sc.store.fork('a', from_entry=record.branches[-1], new_conversation_id='f-branch')
        return [sc.obs.conversation(c) for c in (whole, part, empty, from_branch)], await sc.snapshot()

    @step('fork mistakes')
    async def _(sc: Script) -> Any:
        results = []
        for kwargs in (
            {'new_conversation_id': 'f-whole'},
            {'at': 99},
            {'at': 1, 'from_entry': 'x'},
            {'from_entry': 'nope'},
            {'source_scope': 'bob'},
        ):
            try:
                await sc.store.fork('a', **kwargs)
            except Exception as e:
                results.append(outcome(e))
        try:
            await sc.store.fork('missing')
        except Exception as e:
            results.append(outcome(e))
        return results

    @step('turns on forks')
    async def _(sc: Script) -> Any:
        return [
            await sc.turn('f-whole', ask('fork turn')),
            await sc.turn('f-part', ask('part turn'), scope='bob'),
            await sc.turn('f-empty', ask('empty turn')),
        ]

    @step('scopes')
    async def _(sc: Script) -> Any:
        await sc.turn('s', ask('mine'), scope='alice')
        results: list[Any] = [
            sc.obs.conversation(await sc.store.load('s', scope='bob')),
            sc.obs.conversation(await sc.store.load('s', scope='alice')),
            await sc.store.load_entries('s', scope='bob'),
        ]
        loaded = await sc.store.load('s')
        assert loaded is not None
        for attempt in (
            lambda: sc.store.save(loaded, scope='bob'),
            lambda: sc.store.fork('s', source_scope='bob'),
        ):
            try:
                await attempt()
            except Exception as e:
                results.append(outcome(e))
        try:
            await sc.store.branch('s', at=0, expected_revision=loaded.revision, scope='bob')
        except Exception as e:
            results.append(outcome(e))
        await sc.store.delete('s', scope='bob')
        results.append(await sc.turn('s', ask('no scope keeps alice')))
        results.append(await sc.turn('s', ask('scoped'), scope='alice'))
        forked = await sc.store.fork('s', source_scope='alice', new_conversation_id='s-fork')
        results.append(sc.obs.conversation(forked))
        results.append(await sc.snapshot())
        return results

    @step('a scope given to a conversation saved without one conflicts')
    async def _(sc: Script) -> Any:
        loaded = await sc.store.load('f-empty')
        assert loaded is not None
        return await sc.store.save(loaded, scope='alice')

    @step('empty conversations')
    async def _(sc: Script) -> Any:
        empty = Conversation(conversation_id='z')
        saved = await sc.store.save(empty)
        loaded = await sc.store.load('z')
        entries = await sc.store.load_entries('z')
        again = await sc.store.save(Conversation(conversation_id='z2', messages=[]), scope='alice')
        return [saved, sc.obs.conversation(empty), sc.obs.conversation(loaded), entries, again]

    @step('a turn on an empty conversation')
    async def _(sc: Script) -> Any:
        return await sc.turn('z', ask('first at last'))

    @step('usage and deferred tool requests travel on the record')
    async def _(sc: Script) -> Any:
        deferred = DeferredToolRequests(
            calls=[ToolCallPart('ext', {'q': uni}, tool_call_id='d1')],
            approvals=[ToolCallPart('rm', '{"path": "/"}', tool_call_id='d2')],
            metadata={'d2': {'why': 'dangerous', 'n': [1, 2]}},
        )
        usage = RunUsage(
            requests=3, tool_calls=2, input_tokens=1234, output_tokens=56, details={'reasoning': 7}
        )
        conversation = Conversation(
            conversation_id='d',
            messages=[ask('delete /'), call('rm', {'path': '/'}, 'd2')],
            usage=usage,
            deferred_tool_requests=deferred,
        )
        await sc.store.save(conversation)
        loaded = await sc.store.load('d')
        fork_all = await sc.store.fork('d', new_conversation_id='d-all')
        fork_part = await sc.store.fork('d', at=1, new_conversation_id='d-part')
        assert loaded is not None
        kept = await sc.store.branch('d', at=2, expected_revision=loaded.revision)
        cut = await sc.store.branch('d', at=1, expected_revision=kept.revision)
        return [sc.obs.conversation(c) for c in (loaded, fork_all, fork_part, kept, cut)]

    @step('large, unicode and binary messages')
    async def _(sc: Script) -> Any:
        return await sc.turn(
            'big',
            ask(['a pdf', BinaryContent(b'%PDF-1.4\x00\xff\xfe' * 1000, media_type='application/pdf')]),
            say(big),
            ask(uni),
            returned('shot', BinaryContent(b'RIFF\x00\x01', media_type='audio/wav'), 'b1'),
            say(uni * 100),
        )

    @step('unicode ids and scopes')
    async def _(sc: Script) -> Any:
        cid = 'chat/ünï \U0001f600 "quoted" \\ %s ?'
        first = await sc.turn(cid, ask('u'), scope='élan 中')
        return first, await sc.turn(cid, say('v'), scope='élan 中'), await sc.snapshot()

    @step('delete: forks keep what they share')
    async def _(sc: Script) -> Any:
        record = next(r for r in await sc.store.list_conversations() if r.conversation_id == 'a')
        tips = [record.head_id, *record.branches]
        await sc.store.delete('a')
        reads = []
        for tip in tips:
            try:
                reads.append([sc.obs.entry(e) for e in await sc.store.read_history(tip)])
            except LookupError as e:
                reads.append(outcome(e))
        return reads, await sc.snapshot()

    @step('delete twice, delete missing')
    async def _(sc: Script) -> Any:
        await sc.store.delete('a')
        await sc.store.delete('never')
        return await sc.snapshot()

    @step('a deleted id created again refuses the old revision')
    async def _(sc: Script) -> Any:
        old = await sc.store.load('z')
        assert old is not None
        await sc.store.delete('z')
        await sc.turn('z', ask('reborn'))
        old.messages.append(ask('from before'))
        try:
            await sc.store.save(old)
        except Exception as e:
            return outcome(e), await sc.snapshot()
        return 'saved over', await sc.snapshot()

    @step('delete everything')
    async def _(sc: Script) -> Any:
        for record in await sc.store.list_conversations():
            await sc.store.delete(record.conversation_id)
        return await sc.snapshot()

    return out


STEPS = steps()


async def run_script(store: ConversationStore) -> list[Any]:
    sc = Script(store)
    observed = []
    for name, fn in STEPS:
        try:
            observed.append((name, await fn(sc)))
        except Exception as e:
            observed.append((name, outcome(e)))
    return observed


@pytest.mark.parametrize('kind', ['memory', 'sqlite', 'postgres'])
async def test_every_store_matches_pydantic_ais_in_memory_store(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    expected = await run_script(InMemoryConversationStore())
    if kind == 'memory':
        store: Any = open_store('memory://')
    elif kind == 'sqlite':
        store = open_store(f'sqlite:///{tmp_path / "c.db"}')
    else:
        store = open_store(request.getfixturevalue('postgres_url'), timeout=5)
    async with store:
        observed = await run_script(store)
    assert [name for name, _ in observed] == [name for name, _ in expected]
    for (name, got), (_, want) in zip(observed, expected, strict=True):
        assert got == want, f'step {name!r} differs from InMemoryConversationStore'


async def random_workload(store: ConversationStore, seed: int) -> list[Any]:
    """Seeded turns, rewrites, branches, forks and deletes; after each, which entries every store still has."""
    import random

    rng = random.Random(seed)
    sc = Script(store)
    seen: list[str] = []
    observed: list[Any] = []
    forks = 0
    for step in range(60):
        cids = [r.conversation_id for r in await store.list_conversations()] or ['a']
        cid = rng.choice([*cids, 'a', 'b'])
        op = rng.choice(['turn', 'turn', 'rewrite', 'branch', 'back', 'fork', 'fork', 'delete', 'delete'])
        loaded = await store.load(cid)
        try:
            if loaded is None or op == 'turn':
                result: Any = await sc.turn(cid, ask(f's{step}'), say(f'r{step}'))
            elif op == 'rewrite':
                keep = rng.randrange(len(loaded.messages) + 1)
                rewritten = Conversation(
                    messages=[*loaded.messages[:keep], ask(f'w{step}')],
                    conversation_id=cid,
                    revision=loaded.revision,
                )
                result = [sc.obs.entry(e) for e in await store.save(rewritten)]
            elif op == 'branch':
                at = rng.randrange(len(loaded.messages) + 1)
                result = sc.obs.conversation(
                    await store.branch(cid, at=at, expected_revision=loaded.revision)
                )
            elif op == 'back':
                record = await store.read_record(cid)
                assert record is not None
                tip = rng.choice([*record.branches, record.head_id or 'none'])
                result = sc.obs.conversation(
                    await store.branch(cid, from_entry=tip, expected_revision=loaded.revision)
                )
            elif op == 'fork':
                forks += 1
                at = rng.randrange(len(loaded.messages) + 1)
                result = sc.obs.conversation(
                    await store.fork(cid, at=at, new_conversation_id=f'{cid}.{forks}')
                )
            else:
                await store.delete(cid)
                result = 'deleted'
        except Exception as e:
            result = outcome(e)
        for record in await store.list_conversations():
            for tip in [record.head_id, *record.branches]:
                for entry in await store.read_history(tip):
                    if entry.id not in seen:
                        seen.append(entry.id)
        kept = []
        for entry_id in seen:
            try:
                await store.read_entry(entry_id)
                kept.append(sc.obs.name(entry_id, 'e'))
            except LookupError:
                pass
        observed.append((step, op, cid, result, kept, await sc.snapshot()))
    return observed


@pytest.mark.parametrize('kind', ['memory', 'sqlite', 'postgres'])
async def test_a_random_workload_keeps_and_frees_the_same_entries(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Delete frees exactly the entries no remaining conversation reaches (heads, branches, forks), as the reference."""
    for seed in (2,):  # seed 2 reuses a deleted id a fork still reaches
        expected = await random_workload(InMemoryConversationStore(), seed)
        if kind == 'memory':
            store: Any = open_store('memory://')
        elif kind == 'sqlite':
            store = open_store(f'sqlite:///{tmp_path / f"c{seed}.db"}')
        else:
            store = open_store(request.getfixturevalue('postgres_url'), timeout=5)
            async with store:
                for record in await store.list_conversations():
                    await store.delete(record.conversation_id)
            store = open_store(request.getfixturevalue('postgres_url'), timeout=5)
        async with store:
            observed = await random_workload(store, seed)
        for got, want in zip(observed, expected, strict=True):
            assert got == want, f'step {want[:3]} differs from InMemoryConversationStore'
