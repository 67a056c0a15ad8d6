"""The chat front-end helpers: compact, clear, history_stats, patch_dangling_tool_calls."""

from __future__ import annotations

import asyncio
import copy

import pytest
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_context import ContextBudget, HeuristicCounter, validate_view
from pydantic_ai_context._parts import marker
from pydantic_ai_context.commands import (
    clear,
    compact,
    compact_result,
    history_stats,
    patch_dangling_tool_calls,
)

from .builders import History, Tool, long_text


def summariser(
    answer: str | Exception = 'The user wants the parser fixed in src/app/parser.py.',
) -> tuple[FunctionModel, list[str]]:
    prompts: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts.append(
            '\n'.join(p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart))
        )
        if isinstance(answer, Exception):
            raise answer
        return ModelResponse(parts=[TextPart(answer)])

    return FunctionModel(respond), prompts


def chat_log() -> list[ModelMessage]:
    log = History().user('fix the parser', system='You are terse.')
    log.step(Tool('read_file', {'path': 'src/app/parser.py'}, long_text(40)))
    log.answer('Fixed the off-by-one.')
    log.user('now run the tests').step(Tool('execute_bash', {'command': 'pytest'}, long_text(20))).answer(
        'All pass.'
    )
    return log.messages


def test_compact_returns_a_summary_request_and_an_acknowledgement() -> None:
    model, prompts = summariser()
    log = chat_log()
    snapshot = copy.deepcopy(log)
    result = asyncio.run(compact_result(log, model=model, focus='the parser bug', counter=HeuristicCounter()))
    assert result.compacted
    assert log == snapshot
    request, ack = result.messages
    assert isinstance(request, ModelRequest)
    assert isinstance(ack, ModelResponse)
    assert request.parts[0] == SystemPromptPart('You are terse.', timestamp=request.parts[0].timestamp)
    assert 'src/app/parser.py' in request.parts[-1].content
    record = marker(request)
    assert record is not None
    assert record['kind'] == 'summary'
    assert record['covers'] == [0, len(log)]
    assert result.tokens_after < result.tokens_before
    assert '<focus>\nthe parser bug\n</focus>' in prompts[0]
    assert '<transcript>' in prompts[0]
    assert 'You are terse.' not in prompts[0]  # kept verbatim, not summarised
    # the compacted history is a valid start for the next run
    validate_view([*result.messages, ModelRequest(parts=[UserPromptPart('next')])])


def test_compact_returns_the_list() -> None:
    model, _ = summariser()
    assert len(asyncio.run(compact(chat_log(), model=model, counter=HeuristicCounter()))) == 2


def test_compact_leaves_the_history_alone_and_says_why() -> None:
    log = chat_log()
    empty = asyncio.run(compact_result([], model=summariser()[0]))
    assert not empty.compacted
    assert empty.reason == 'the history is empty'
    failing, _ = summariser(RuntimeError('down'))
    failed = asyncio.run(compact_result(log, model=failing, counter=HeuristicCounter()))
    assert not failed.compacted
    assert 'failed' in failed.reason
    assert failed.messages == log
    inflated, _ = summariser('word ' * 50_000)
    big = asyncio.run(compact_result(log, model=inflated, counter=HeuristicCounter()))
    assert not big.compacted
    assert 'not smaller' in big.reason
    assert big.messages == log


@pytest.mark.parametrize(
    ('error', 'reason'),
    [
        (
            ModelHTTPError(
                500, 'gpt-x', body={'error': {'message': 'SECRET: the user said "my card is 4111"'}}
            ),
            'the summariser failed: ModelHTTPError (HTTP 500)',
        ),
        (
            ModelHTTPError(429, 'gpt-x', body='SECRET quota for account acme'),
            'ModelHTTPError (HTTP 429, rate limited)',
        ),
        (RuntimeError('SECRET in a message'), 'the summariser failed: RuntimeError'),
        (TimeoutError(), 'the summariser failed: timed out'),
    ],
    ids=['500', '429', 'other', 'timeout'],
)
def test_a_failed_compact_keeps_the_error_type_and_status_not_the_body(error: Exception, reason: str) -> None:
    failing, _ = summariser(error)
    result = asyncio.run(compact_result(chat_log(), model=failing, counter=HeuristicCounter()))
    assert not result.compacted
    assert reason in result.reason
    assert 'SECRET' not in result.reason


@pytest.mark.parametrize('model', ['gpt4-typo', None])
def test_a_model_that_cannot_be_built_is_named_with_why(model: object) -> None:
    # It used to say only "the summariser failed: UserError" (or TypeError for None).
    log = chat_log()
    result = asyncio.run(compact_result(log, model=model, counter=HeuristicCounter()))
    assert not result.compacted
    assert result.reason.startswith(f'cannot use the model {model!r}')
    if model is not None:  # pydantic-ai's own words: an unknown model, or the package to install
        assert result.reason.startswith(f'cannot use the model {model!r}: ')
    assert result.messages == log


def test_compact_after_an_interrupt() -> None:
    model, prompts = summariser()
    log = History().user('deploy').call(Tool('deploy', {'env': 'prod'})).messages
    result = asyncio.run(compact_result(log, model=model, counter=HeuristicCounter()))
    assert 'assistant called deploy' in prompts[0]
    assert result.messages is not log


def test_clear() -> None:
    assert clear() == []


def test_history_stats() -> None:
    log = chat_log()
    budget = ContextBudget(context_window=32_000)
    stats = history_stats(log, counter=HeuristicCounter(), budget=budget)
    assert stats.messages == len(log)
    assert stats.user_turns == 2
    assert stats.tool_calls == 2
    assert stats.tokens == HeuristicCounter().count_messages(log)
    assert stats.share is not None
    assert abs(stats.share - stats.tokens / budget.limit) < 1e-9
    assert [t.tool_name for t in stats.largest] == ['read_file', 'execute_bash']
    assert stats.largest[0].count == 1
    assert stats.largest[0].tokens > stats.largest[1].tokens
    assert 'read_file' in str(stats)
    assert 'user turns' in str(stats)
    assert ' 1 result' in str(stats)
    assert ' 1 results' not in str(stats)


def test_history_stats_reads_like_english() -> None:
    one = History().user('hi').step(Tool('ls', {}, 'a.py')).answer('done').build()
    text = str(history_stats(one, counter=HeuristicCounter()))
    assert text.startswith('4 messages, 1 user turn, 1 tool call, ')
    assert str(history_stats([], counter=HeuristicCounter())).startswith(
        '0 messages, 0 user turns, 0 tool calls, 0 tokens'
    )
    assert history_stats([], counter=HeuristicCounter()).share is None


def test_patch_dangling_tool_calls_is_reexported() -> None:
    log = History().user('deploy').call(Tool('deploy', {'env': 'prod'})).messages
    patched = patch_dangling_tool_calls(log)
    assert len(patched) == 3
    assert validate_view(patched) is None
