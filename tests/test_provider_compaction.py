"""Provider-native compaction (`CompactionPart` in a response) as a boundary the chain respects.

Live `FunctionModel` agents return, at some turn, a response holding a provider part (OpenAI's
shape: encrypted, `content=None`; Anthropic's: a readable summary and a signature) followed by a
tool call. The model function plays the provider: it trims what it receives before the latest part
as the adapters do (keeping the standing prompt), measures what is left, and reports that as usage,
with OpenAI's opaque part at the size the server says, not the estimate. Three checks, for `coding`
and `chat` on both shapes: the post-window history keeps its part and steps, no request after a
compaction lacks the part, and the gauge is within 10% + 300 tokens of what the provider is sent.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai import messages as messages_module
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
from pydantic_ai.usage import RequestUsage

from pydantic_ai_context import (
    ContextBudgetExceeded,
    ContextUsageEvent,
    HeuristicCounter,
    HistoryIntegrityError,
    normalize,
    normalize_with_repairs,
    profile,
    validate_view,
)
from pydantic_ai_context._compaction import OPAQUE_BYTES_PER_TOKEN, opaque_tokens, window
from pydantic_ai_context._parts import marker, message_pinned
from pydantic_ai_context.integrity import _already_valid
from pydantic_ai_context.policies.fit import fit_to_budget
from pydantic_ai_context.policies.isolate import isolate_boundaries
from pydantic_ai_context.replay import extractive_summary_model
from pydantic_ai_context.session import ContextSession
from pydantic_ai_context.tokens import default_counter

from ._examples import examples
from .invariants import assert_all
from .realistic import prose
from .strategies import compaction_histories

CompactionPart: Any = getattr(messages_module, 'CompactionPart', None)
post_compaction_window: Any = getattr(messages_module, 'post_compaction_window', None)

pytestmark = pytest.mark.skipif(
    CompactionPart is None or post_compaction_window is None,
    reason='provider compaction (CompactionPart, post_compaction_window) is pydantic-ai 2.68+',
)

COUNTER = default_counter()
INSTRUCTIONS = 'You are a careful coding agent. ' + prose(120, seed=3)
SYSTEM = 'Work in /repo. Never push.'
OPAQUE_SERVER_TOKENS = 1_100
"""What the OpenAI "server" counts for its encrypted part (our estimate, from the payload, is 900)."""
ENCRYPTED = base64.b64encode(bytes(range(256)) * 19)[:4800].decode()


def openai_part(n: int = 0) -> Any:
    return CompactionPart(
        content=None,
        id=f'cmp_{n}',
        provider_name='openai',
        provider_details={'type': 'compaction', 'encrypted_content': ENCRYPTED},
    )


def anthropic_part(n: int = 0) -> Any:
    return CompactionPart(
        content='Summary of the work so far: ' + prose(180, seed=n),
        provider_name='anthropic',
        provider_details={'signature': f'sig-{n}'},
    )


SHAPES = {'openai': openai_part, 'anthropic': anthropic_part}


def wire(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """What an adapter sends: the standing prompt, then everything from the latest provider part on."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, ModelResponse):
            for j in range(len(message.parts) - 1, -1, -1):
                if isinstance(message.parts[j], CompactionPart):
                    first = next((m for m in messages[:i] if isinstance(m, ModelRequest)), None)
                    system = [p for p in first.parts if isinstance(p, SystemPromptPart)] if first else []
                    head = [ModelRequest(parts=system)] if system else []
                    return [*head, dataclasses.replace(message, parts=message.parts[j:]), *messages[i + 1 :]]
    return list(messages)


def provider_count(messages: Sequence[ModelMessage], info: AgentInfo) -> int:
    """The provider's count of a request: what it is sent after its trim, its own size for an opaque part."""
    sent = wire(messages)
    stripped = [dataclasses.replace(m, instructions=None) if isinstance(m, ModelRequest) else m for m in sent]
    total = COUNTER.count_messages(stripped)
    for part in (p for m in sent for p in m.parts):
        total += OPAQUE_SERVER_TOKENS - opaque_tokens(part) if opaque_tokens(part) else 0
    total += COUNTER.count_text(info.instructions) if info.instructions else 0
    return total


@dataclass
class CompactingModel:
    """A provider that compacts at turn `compact_at` (a part before the turn's tool call), then goes on."""

    shape: str
    compact_at: int | None
    turns: int = 30
    seen: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])
    measured: list[int] = field(default_factory=list[int])
    part: Any = None

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not info.function_tools:  # the profile's summariser (the run's model, without tools)
            return ModelResponse(parts=[TextPart('Read modules; nothing failed. ' + prose(40, seed=1))])
        validate_view(messages)
        self.seen.append(list(messages))
        total = provider_count(messages, info)
        self.measured.append(total)
        n = len(self.seen)
        parts: list[Any] = []
        if n == self.compact_at:
            self.part = SHAPES[self.shape](n)
            parts.append(self.part)
        if n < self.turns:
            parts.append(ToolCallPart('read_file', {'path': f'src/m{n}.py'}, tool_call_id=f'call_{n}'))
        else:
            parts.append(TextPart('All files read.'))
        return ModelResponse(parts=parts, usage=RequestUsage(input_tokens=total, output_tokens=20))

    def model(self) -> FunctionModel:
        return FunctionModel(self.respond)


def make_agent(model: CompactingModel, ctx_profile: Any) -> Agent[None, str]:
    agent = Agent(model.model(), system_prompt=SYSTEM, instructions=INSTRUCTIONS, capabilities=[ctx_profile])

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file."""
        return f'# {path}\n' + prose(260, seed=len(path))

    return agent


WINDOWS = {'coding': 16_000, 'chat': 8_000}


def holds(messages: Sequence[ModelMessage], part: Any) -> bool:
    return any(p is part or p == part for m in messages for p in m.parts)


# --- the three target checks, live --------------------------------------------------------------


@pytest.mark.parametrize('shape', ['openai', 'anthropic'])
@pytest.mark.parametrize('name', ['coding', 'chat'])
@pytest.mark.parametrize('compact_at', [2, 20])
async def test_live_run_keeps_the_part_and_budgets_what_is_sent(
    name: str, shape: str, compact_at: int
) -> None:
    usages: list[ContextUsageEvent] = []
    model = CompactingModel(shape, compact_at)
    agent = make_agent(model, profile(name, context_window=WINDOWS[name], on_usage=usages.append))
    result = await agent.run('Read every module.')
    assert model.part is not None
    assert len(model.seen) == model.turns
    # (b) no request after the compaction lacks the part; and it opens what the model is sent.
    for request in model.seen[compact_at:]:
        assert holds(request, model.part)
        assert [m.parts for m in wire(request)] == [m.parts for m in request]  # nothing before the boundary
    # (c) the gauge counts what the provider is sent (its measurement of the same request).
    assert len(usages) == len(model.measured)
    for usage, measured in list(zip(usages, model.measured, strict=True))[compact_at:]:
        assert abs(usage.used_tokens - measured) <= 0.1 * measured + 300, (usage, measured)
    # (a) the post-window history, passed back, keeps its part and steps.
    history = post_compaction_window(result.all_messages())
    again = CompactingModel(shape, None, turns=1)
    await make_agent(again, profile(name, context_window=128_000)).run(
        'Summarise what you read.', message_history=history
    )
    first = again.seen[0]
    assert first[0].parts[0] is history[0].parts[0]
    assert_steps_kept(history, first)


def assert_steps_kept(history: Sequence[ModelMessage], view: Sequence[ModelMessage]) -> None:
    """Every call of `history` is in `view`, with its result (possibly shortened: same id)."""
    calls = {
        p.tool_call_id
        for m in view
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    }
    results = {p.tool_call_id for m in view for p in m.parts if isinstance(p, ToolReturnPart)}
    wanted = {p.tool_call_id for m in history for p in m.parts if isinstance(p, ToolCallPart)}
    assert wanted <= calls
    assert wanted <= results


@pytest.mark.parametrize('shape', ['openai', 'anthropic'])
@pytest.mark.parametrize('name', ['coding', 'chat'])
async def test_the_stateless_shape_is_not_wiped(name: str, shape: str) -> None:
    """A history that starts with the compaction response (`OpenAICompaction(stateless=True)`)."""
    model = CompactingModel(shape, 5, turns=12)
    result = await make_agent(model, profile('transparent')).run('Read every module.')
    history = post_compaction_window(result.all_messages())
    assert isinstance(history[0], ModelResponse)
    assert len(history) == 15
    again = CompactingModel(shape, None, turns=1)
    await make_agent(again, profile(name, context_window=128_000)).run('And now?', message_history=history)
    first = again.seen[0]
    assert first[: len(history)] == history  # nothing left out: the part, its call and every step
    assert len(first) == len(history) + 1


async def test_a_session_resumed_on_a_post_window_history() -> None:
    model = CompactingModel('openai', 4, turns=10)
    await make_agent(model, profile('transparent')).run('Read every module.')
    history = post_compaction_window(model.seen[-1])
    session = ContextSession(profile('coding', context_window=16_000))
    await session.set_messages(history)
    await session.add_message({'role': 'user', 'content': 'What did you find?'})
    view = await session.messages_for_request()
    assert view[0].parts[0] is history[0].parts[0] or view[0].parts[0] == history[0].parts[0]
    assert_steps_kept(history, view)
    validate_view(view)
    again = CompactingModel('openai', None, turns=1)
    result = await session.run(make_agent(again, profile('transparent')), 'Anything else?')
    assert holds(again.seen[0], history[0].parts[0])
    assert result.output == 'All files read.'


async def test_without_a_provider_part_nothing_changes() -> None:
    model = CompactingModel('openai', None, turns=8)
    await make_agent(model, profile('coding', context_window=16_000)).run('Read every module.')
    log = model.seen[-1]
    assert window(log) is log


# --- normalize and validity ----------------------------------------------------------------------


def post_window_log(part: Any) -> list[ModelMessage]:
    return [
        ModelResponse(parts=[part, ToolCallPart('ls', {}, tool_call_id='a')]),
        ModelRequest(parts=[ToolReturnPart('ls', 'a.py', tool_call_id='a')]),
        ModelResponse(parts=[ToolCallPart('cat', {'path': 'a.py'}, tool_call_id='b')]),
        ModelRequest(parts=[ToolReturnPart('cat', 'print(1)', tool_call_id='b')]),
    ]


@pytest.mark.parametrize('shape', ['openai', 'anthropic'])
def test_normalize_keeps_a_leading_compaction_response(shape: str) -> None:
    log = post_window_log(SHAPES[shape]())
    view, repairs = normalize_with_repairs(log)
    assert view == log
    assert repairs == []
    validate_view(view)
    assert normalize(view) == view


def test_a_post_window_view_takes_the_fast_path() -> None:
    """Compiles of a log that starts with the compaction response skip the repair passes."""
    log = post_window_log(openai_part())
    assert _already_valid(log)
    assert not _already_valid(post_window_log(TextPart('stray')))


def test_any_other_leading_response_is_still_repaired() -> None:
    log = post_window_log(TextPart('no compaction here'))
    view, repairs = normalize_with_repairs(log)
    assert [r.kind for r in repairs][:1] == ['leading_response']
    assert all(isinstance(p, ToolReturnPart) for m in view for p in m.parts)  # the response is left out
    with pytest.raises(HistoryIntegrityError, match='must start with a ModelRequest'):
        validate_view(log)


def test_a_leading_response_holding_a_part_later_starts_at_the_part() -> None:
    part = openai_part()
    log = post_window_log(part)
    log[0] = ModelResponse(parts=[TextPart('thinking aloud'), *log[0].parts])
    view, repairs = normalize_with_repairs(log)
    assert view[0].parts[0] is part
    assert len(view) == 4
    assert [r.kind for r in repairs] == ['leading_response']


def test_the_boundary_is_pinned_while_the_others_are_not() -> None:
    log = post_window_log(anthropic_part())
    assert message_pinned(log[0])
    assert not message_pinned(log[2])


# --- the window and the counter ------------------------------------------------------------------


def test_window_keeps_the_standing_prompt_and_cuts_the_response_at_its_part() -> None:
    part = anthropic_part()
    log: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart(SYSTEM), UserPromptPart('go')], instructions=INSTRUCTIONS),
        ModelResponse(parts=[ToolCallPart('ls', {}, tool_call_id='a')]),
        ModelRequest(parts=[ToolReturnPart('ls', 'x' * 500, tool_call_id='a')]),
        ModelResponse(parts=[TextPart('before'), part, ToolCallPart('ls', {}, tool_call_id='b')]),
        ModelRequest(parts=[ToolReturnPart('ls', 'y', tool_call_id='b')]),
    ]
    sent = window(log)
    assert [p.content for p in sent[0].parts] == [SYSTEM]
    assert sent[1].parts[0] is part
    assert len(sent[1].parts) == 2
    assert sent[2] is log[4]
    assert window(sent) == sent  # a window of the window changes nothing
    assert window(log)[0] is sent[0]
    assert window(log)[1] is sent[1]


def test_an_opaque_part_is_estimated_from_its_payload() -> None:
    part = openai_part()
    expected = len(ENCRYPTED) * 3 // 4 // OPAQUE_BYTES_PER_TOKEN
    assert opaque_tokens(part) == expected == 900
    assert opaque_tokens(anthropic_part()) == 0  # readable: counted as text
    bare = ModelResponse(parts=[dataclasses.replace(part, provider_details={'type': 'compaction'})])
    assert COUNTER.count_messages([ModelResponse(parts=[part])]) - COUNTER.count_messages([bare]) == expected


async def test_the_gauge_anchors_on_the_provider_count_of_an_opaque_part() -> None:
    usages: list[ContextUsageEvent] = []
    model = CompactingModel('openai', 3, turns=8)
    await make_agent(model, profile('coding', context_window=32_000, on_usage=usages.append)).run('go')
    after = usages[4:]  # from the second request after the compaction, usage is anchored
    assert after
    assert all(u.anchored for u in after)
    for usage, measured in zip(after, model.measured[4:], strict=True):
        assert abs(usage.used_tokens - measured) <= 50


# --- invariants on generated histories ------------------------------------------------------------


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=compaction_histories(), name=st.sampled_from(['coding', 'chat', 'long_horizon']))
async def test_invariants_hold_with_a_provider_part(log: list[ModelMessage], name: str) -> None:
    import copy

    snapshot = copy.deepcopy(log)
    try:
        view = await profile(name, context_window=6_000).compile(log)
    except ContextBudgetExceeded as exc:  # the framing and the newest step alone may not fit 6k
        error: ContextBudgetExceeded | None = exc
    else:
        error = None
    if error is not None:
        assert error.used > error.limit
        return
    assert_all(log, snapshot, view)


# --- the chain on a log holding a part ------------------------------------------------------------


def mid_run_log(part: Any, steps_before: int = 4, steps_after: int = 14) -> list[ModelMessage]:
    """A run that the provider compacted at step `steps_before`, before its tool call."""
    log: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart(SYSTEM), UserPromptPart('Read every module.')])
    ]
    for n in range(steps_before + steps_after):
        call = ToolCallPart('read_file', {'path': f'src/m{n}.py'}, tool_call_id=f'call_{n}')
        log.append(ModelResponse(parts=[part, call] if n == steps_before else [call]))
        log.append(
            ModelRequest(parts=[ToolReturnPart('read_file', prose(300, seed=n), tool_call_id=f'call_{n}')])
        )
    return log


@pytest.mark.parametrize('shape', ['openai', 'anthropic'])
async def test_a_summary_starts_after_the_boundary_step(shape: str) -> None:
    """Mid-run, what is sent holds no user prompt: the boundary step is the framing a summary keeps."""
    part = SHAPES[shape]()
    log = mid_run_log(part, steps_after=30)
    chat = profile('chat', context_window=8_000, summary_model=extractive_summary_model())
    view = await chat.compile(log)
    assert view[0].parts == window(log)[0].parts  # the standing prompt
    assert view[1] is log[9]  # the response holding the part, whole,
    assert view[2].parts[0] is log[10].parts[0]  # and its result
    summaries = [i for i, m in enumerate(view) if (marker(m) or {}).get('kind') == 'summary']
    assert summaries  # the summary covers steps after the boundary step (it joins its request)
    assert summaries[0] >= 2


def test_a_policy_called_on_its_own_acts_on_the_window() -> None:
    part = openai_part()
    log = mid_run_log(part)
    view = fit_to_budget(keep_last_steps=1)(log)  # no budget: only the window is applied
    assert [m.parts for m in view] == [m.parts for m in window(log)]
    assert view[1].parts[0] is part


@pytest.mark.parametrize('mode', ['digest', 'mask', 'drop'])
def test_isolation_keeps_a_finished_run_that_holds_the_part(mode: str) -> None:
    """The run holding the boundary lost its prompt to the provider's summary, and its part carries
    the provider's state: it stays as it is; the runs after it are collapsed as usual."""
    part = openai_part()

    def step(n: int, *lead: Any) -> list[ModelMessage]:
        call = ToolCallPart('read_file', {'path': f'src/m{n}.py'}, tool_call_id=f'call_{n}')
        return [
            ModelResponse(parts=[*lead, call]),
            ModelRequest(parts=[ToolReturnPart('read_file', prose(80, seed=n), tool_call_id=f'call_{n}')]),
        ]

    log: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('Read the first module.')]),
        *step(1),
        *step(2, part),
        *step(3),
        ModelResponse(parts=[TextPart('Read.')]),
        ModelRequest(parts=[UserPromptPart('Read the next one.')]),
        *step(4),
        *step(5),
        ModelResponse(parts=[TextPart('Read too.')]),
        ModelRequest(parts=[UserPromptPart('And now?')]),
    ]
    view = isolate_boundaries(mode=mode)(log)
    sent = window(log)
    assert view[:6] == sent[:6]  # the boundary run's steps from the part on, as they are
    assert view[0].parts[0] is part
    collapsed = view[6:]
    assert collapsed != list(sent[6:])  # the next finished run is isolated


@pytest.mark.parametrize('shape', ['openai', 'anthropic'])
@pytest.mark.parametrize('name', ['coding', 'long_horizon'])
async def test_a_window_without_a_prompt_reads_back_after_a_drop(shape: str, name: str) -> None:
    """Regression (the read-back property test, a generated history with a provider part): the
    provider's window held no user prompt of its own, so the drop note `fit_to_budget` adds became
    the view's first user prompt, whose digest named another conversation than the log's (no ids):
    no ref of the view could be read back (a summary opening the view did the same)."""
    from pydantic_ai_context.readback import read_context

    from .test_readback import refs_in

    log = mid_run_log(SHAPES[shape](), steps_before=2, steps_after=60)
    p = profile(
        name,
        context_window=4_000,
        reserved_output=400,
        counter=HeuristicCounter(),
        summary_model=extractive_summary_model(),
        clamp_fresh=False,
    )
    view = await p.compile(log)
    refs = refs_in(view)
    assert {'dropped', 'summary'} & set(refs.values())  # the view opens with a note or a summary
    for ref in refs:
        assert 'no longer available' not in read_context(ref, view, p.archive, limit=100_000)
