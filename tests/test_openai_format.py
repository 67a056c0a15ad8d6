"""OpenAI chat-format dicts ⇄ pydantic-ai messages: shapes, round trips and clear errors."""

from __future__ import annotations

import inspect
import re
import textwrap
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import messages as messages_module
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_context import HistoryIntegrityError, normalize
from pydantic_ai_context.openai_format import CONVERTED_AT, from_openai, to_openai

from ._examples import examples
from .builders import History, Tool

CHAT: list[dict[str, Any]] = [
    {'role': 'system', 'content': 'You are a coding agent.'},
    {'role': 'developer', 'content': 'Prefer small diffs.'},
    {'role': 'user', 'content': 'Fix the failing test.'},
    {
        'role': 'assistant',
        'content': 'Let me look.',
        'tool_calls': [
            {'id': 'c1', 'type': 'function', 'function': {'name': 'bash', 'arguments': '{"cmd": "pytest"}'}},
            {'id': 'c2', 'type': 'function', 'function': {'name': 'view', 'arguments': '{"path": "a.py"}'}},
        ],
    },
    {'role': 'tool', 'tool_call_id': 'c1', 'content': '1 failed'},
    {'role': 'tool', 'tool_call_id': 'c2', 'content': 'def f(): return 1'},
    {'role': 'assistant', 'content': None, 'tool_calls': [
        {'id': 'c3', 'type': 'function', 'function': {'name': 'bash', 'arguments': '{}'}},
    ]},
    {'role': 'tool', 'tool_call_id': 'c3', 'content': 'ok'},
    {'role': 'user', 'content': 'and the docs?'},
    {'role': 'assistant', 'content': [{'type': 'text', 'text': 'Fixed.'}, {'type': 'text', 'text': 'Docs too.'}]},
    {'role': 'user', 'content': [
        {'type': 'text', 'text': 'look at this'},
        {'type': 'image_url', 'image_url': {'url': 'https://example.com/a.png'}},
    ]},
]  # fmt: skip


def test_shape_of_a_converted_conversation() -> None:
    history = from_openai(CHAT)
    assert [m.kind for m in history] == [
        'request',
        'response',
        'request',
        'response',
        'request',
        'response',
        'request',
    ]
    first = history[0]
    assert isinstance(first, ModelRequest)
    assert [type(p) for p in first.parts] == [SystemPromptPart, SystemPromptPart, UserPromptPart]
    response = history[1]
    assert isinstance(response, ModelResponse)
    assert [type(p) for p in response.parts] == [TextPart, ToolCallPart, ToolCallPart]
    call = response.parts[1]
    assert isinstance(call, ToolCallPart)
    assert (call.tool_name, call.tool_call_id, call.args_as_dict()) == ('bash', 'c1', {'cmd': 'pytest'})
    # Consecutive tool messages are one request after the assistant message.
    returns = history[2]
    assert isinstance(returns, ModelRequest)
    assert [
        (p.tool_name, p.tool_call_id, p.content) for p in returns.parts if isinstance(p, ToolReturnPart)
    ] == [
        ('bash', 'c1', '1 failed'),
        ('view', 'c2', 'def f(): return 1'),
    ]
    # A tool message followed by a user message: one request, in order.
    mixed = history[4]
    assert [type(p) for p in mixed.parts] == [ToolReturnPart, UserPromptPart]
    assert [p.content for p in history[5].parts if isinstance(p, TextPart)] == ['Fixed.', 'Docs too.']
    last = history[6].parts[0]
    assert isinstance(last, UserPromptPart)
    assert last.content == [
        'look at this',
        ImageUrl(url='https://example.com/a.png'),
    ]
    assert normalize(history) == history  # a valid pydantic-ai history as converted


def test_round_trip_dicts() -> None:
    assert to_openai(from_openai(CHAT)) == CHAT


def test_round_trip_through_pydantic_ai_json() -> None:
    history = from_openai(CHAT)
    reloaded = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(history))
    assert to_openai(reloaded) == CHAT


def test_round_trip_pydantic_ai_history() -> None:
    history = (
        History()
        .user('list the files', system='be brief')
        .step(Tool('ls', {'path': '.'}, 'a.py\nb.py'), Tool('cat', {'path': 'a.py'}, 'print(1)'))
        .answer('Two files.')
        .user('thanks')
        .messages
    )
    again = from_openai(to_openai(history))
    assert to_openai(again) == to_openai(history)
    # Same structure and content: only timestamps and provider details differ.
    assert [[type(p) for p in m.parts] for m in again] == [[type(p) for p in m.parts] for m in history]


def test_conversion_is_deterministic() -> None:
    assert from_openai(CHAT) == from_openai(CHAT)
    assert all(p.timestamp == CONVERTED_AT for p in from_openai(CHAT)[0].parts if hasattr(p, 'timestamp'))


def test_binary_content_round_trips() -> None:
    png = BinaryContent(data=b'\x89PNG\r\n', media_type='image/png')
    wav = BinaryContent(data=b'RIFF0000', media_type='audio/wav')
    pdf = BinaryContent(data=b'%PDF-1.4', media_type='application/pdf')
    history = [ModelRequest(parts=[UserPromptPart(['see', png, wav, pdf])])]
    dicts = to_openai(history)
    assert [item['type'] for item in dicts[0]['content']] == ['text', 'image_url', 'input_audio', 'file']
    back = from_openai(dicts)[0].parts[0]
    assert isinstance(back, UserPromptPart)
    assert isinstance(back.content, list)
    assert [(c.data, c.media_type) for c in back.content[1:]] == [
        (b'\x89PNG\r\n', 'image/png'),
        (b'RIFF0000', 'audio/wav'),
        (b'%PDF-1.4', 'application/pdf'),
    ]


@pytest.mark.filterwarnings('ignore:.*RetryPromptPart.*:UserWarning')
def test_parts_the_chat_format_cannot_hold() -> None:
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('q')]),
        ModelResponse(parts=[ThinkingPart('hmm'), ToolCallPart('f', {'x': 1}, tool_call_id='a')]),
        ModelRequest(parts=[RetryPromptPart('x must be even', tool_name='f', tool_call_id='a')]),
        ModelResponse(parts=[TextPart('done')]),
        ModelRequest(parts=[RetryPromptPart('please answer in JSON')]),
    ]
    dicts = to_openai(history)
    assert dicts[1] == {
        'role': 'assistant',
        'content': None,
        'tool_calls': [{'id': 'a', 'type': 'function', 'function': {'name': 'f', 'arguments': '{"x":1}'}}],
    }
    assert dicts[2]['role'] == 'tool'
    assert dicts[2]['tool_call_id'] == 'a'
    assert 'x must be even' in dicts[2]['content']
    assert dicts[4]['role'] == 'user'
    assert 'please answer in JSON' in dicts[4]['content']


@pytest.mark.skipif(not hasattr(messages_module, 'RetryFeedbackPart'), reason='pydantic-ai 2.x part')
def test_retry_feedback_becomes_a_user_message() -> None:
    feedback: Any = messages_module.RetryFeedbackPart  # type: ignore[attr-defined,unused-ignore]
    info: Any = messages_module.RetryInfo  # type: ignore[attr-defined,unused-ignore]
    part = feedback(content='output must be JSON', retry=info('model_retry'))
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('q')]),
        ModelResponse(parts=[TextPart('x')]),
        ModelRequest(parts=[part]),
    ]
    last = to_openai(history)[-1]
    assert last['role'] == 'user'
    assert 'output must be JSON' in last['content']


def test_non_str_tool_content_is_sent_as_json() -> None:
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('q')]),
        ModelResponse(parts=[ToolCallPart('f', {}, tool_call_id='a')]),
        ModelRequest(parts=[ToolReturnPart('f', {'rows': [1, 2]}, tool_call_id='a')]),
    ]
    assert to_openai(history)[2] == {'role': 'tool', 'tool_call_id': 'a', 'content': '{"rows":[1,2]}'}


def test_system_role_choice() -> None:
    history = [ModelRequest(parts=[SystemPromptPart('rules'), UserPromptPart('hi')])]
    assert to_openai(history, system_role='developer')[0] == {'role': 'developer', 'content': 'rules'}


@pytest.mark.parametrize(
    ('messages', 'message'),
    [
        ([{'role': 'user', 'content': 'hi'}, {'content': 'no role'}], r'message 1: missing "role"'),
        ([{'role': 'function', 'content': 'x'}], r'message 0: a function message needs a "name"'),
        ([{'role': ['user'], 'content': 'x'}], r"message 0: unknown role \['user'\]"),
        ([{'role': {'user': 1}, 'content': 'x'}], r'message 0: unknown role'),
        (
            [{'role': 'user', 'content': 'x'}, {'role': 'function', 'name': 'f', 'content': 'y'}],
            r"message 1: function message 'f' answers no earlier assistant \"function_call\"",
        ),
        ([{'role': 'assistant', 'function_call': 'f()'}], r'message 0: "function_call" must be a dict'),
        (
            [{'role': 'assistant', 'function_call': {'name': 'f', 'arguments': 3}}],
            r'message 0: function_call: function needs a "name" str',
        ),
        (
            [
                {'role': 'user', 'content': 'x'},
                {
                    'role': 'user',
                    'content': [{'type': 'image_url', 'image_url': {'url': 'data:image/png;base64,%%%'}}],
                },
            ],
            r'message 1: user content part 0: the base64 data does not decode',
        ),
        (
            [
                {
                    'role': 'user',
                    'content': [{'type': 'image_url', 'image_url': {'url': 'data:image/png;base64,'}}],
                }
            ],
            r'message 0: user content part 0: the base64 data is empty',
        ),
        (
            [
                {
                    'role': 'user',
                    'content': [{'type': 'input_audio', 'input_audio': {'format': 'wav', 'data': 'nope!'}}],
                }
            ],
            r'message 0: user content part 0: the base64 data does not decode',
        ),
        (
            [
                {
                    'role': 'user',
                    'content': [{'type': 'file', 'file': {'file_data': 'data:application/pdf;base64,***'}}],
                }
            ],
            r'message 0: user content part 0: the base64 data does not decode',
        ),
        (
            [{'role': 'user', 'content': 'x'}, {'role': 'robot', 'content': 'x'}],
            r"message 1: unknown role 'robot'",
        ),
        (['just text'], r'message 0: expected a dict'),
        ([{'role': 'user', 'content': None}], r'message 0: user content'),
        (
            [{'role': 'user', 'content': [{'type': 'video', 'url': 'x'}]}],
            r"message 0: .*unknown content part type 'video'",
        ),
        ([{'role': 'tool', 'tool_call_id': 'nope', 'content': 'x'}], r"message 0: .*tool_call_id 'nope'"),
        ([{'role': 'tool', 'content': 'x'}], r'message 0: a tool message needs a "tool_call_id"'),
        (
            [{'role': 'assistant', 'tool_calls': [{'id': 'a', 'type': 'custom', 'custom': {}}]}],
            r'message 0: tool call 0: only function calls',
        ),
    ],
)
def test_bad_dicts_raise_naming_the_index(messages: list[Any], message: str) -> None:
    with pytest.raises(HistoryIntegrityError, match=message) as info:
        from_openai(messages)
    assert isinstance(info.value, ValueError)  # what callers caught before
    assert info.value.index == int(re.match(r'message (\d+)', message).group(1))  # type: ignore[union-attr]


def test_the_legacy_function_call_becomes_a_tool_call() -> None:
    chat: list[dict[str, Any]] = [
        {'role': 'user', 'content': 'Weather in Paris and Rome?'},
        {'role': 'assistant', 'content': None, 'function_call': {'name': 'weather', 'arguments': '{"city": "Paris"}'}},
        {'role': 'function', 'name': 'weather', 'content': 'sunny'},
        {'role': 'assistant', 'content': 'And Rome:', 'function_call': {'name': 'weather', 'arguments': '{"city": "Rome"}'}},
        {'role': 'function', 'name': 'weather', 'content': 'rain'},
        {'role': 'assistant', 'content': 'Sunny in Paris, rain in Rome.'},
    ]  # fmt: skip
    history = from_openai(chat)
    first, second = history[1], history[3]
    assert first.parts == [ToolCallPart('weather', '{"city": "Paris"}', tool_call_id='function_call_1')]
    assert second.parts == [
        TextPart('And Rome:'),
        ToolCallPart('weather', '{"city": "Rome"}', tool_call_id='function_call_3'),
    ]
    results = [p for m in history for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [(r.tool_call_id, r.content) for r in results] == [
        ('function_call_1', 'sunny'),
        ('function_call_3', 'rain'),
    ]
    # Nothing is lost going back: the calls and results come back in the current format.
    back = to_openai(history)
    assert back[1]['tool_calls'] == [
        {
            'id': 'function_call_1',
            'type': 'function',
            'function': {'name': 'weather', 'arguments': '{"city": "Paris"}'},
        }
    ]
    assert back[2] == {'role': 'tool', 'tool_call_id': 'function_call_1', 'content': 'sunny'}
    extended = [*history, ModelRequest(parts=[UserPromptPart('next')])]
    assert normalize(extended) == extended  # every call answered, nothing repaired


def test_a_valid_data_uri_still_converts() -> None:
    url = 'data:image/png;base64,iVBO%0ARw0K'  # percent-encoded and wrapped, as some clients send it
    [request] = from_openai([{'role': 'user', 'content': [{'type': 'image_url', 'image_url': {'url': url}}]}])
    [image] = request.parts[0].content  # type: ignore[union-attr]
    assert isinstance(image, BinaryContent)
    assert image.data == b'\x89PNG\r\n'
    assert image.media_type == 'image/png'


def test_content_the_format_cannot_carry_raises() -> None:
    from pydantic_ai.messages import DocumentUrl

    history = [ModelRequest(parts=[UserPromptPart(['read', DocumentUrl(url='https://x/y.pdf')])])]
    with pytest.raises(ValueError, match=r'message 0: user prompt part 0 holds DocumentUrl'):
        to_openai(history)


_texts = st.text(alphabet=st.characters(codec='utf-8', exclude_categories=['Cs']), max_size=30)


@st.composite
def chats(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({'role': draw(st.sampled_from(['system', 'developer'])), 'content': draw(_texts)})
    n = 0
    for _ in range(draw(st.integers(1, 6))):
        out.append({'role': 'user', 'content': draw(_texts)})
        for _ in range(draw(st.integers(0, 3))):
            ids = [f'call_{n + i}' for i in range(draw(st.integers(1, 3)))]
            n += len(ids)
            calls = [
                {
                    'id': i,
                    'type': 'function',
                    'function': {'name': draw(st.sampled_from(['a', 'b'])), 'arguments': '{}'},
                }
                for i in ids
            ]
            content = draw(st.one_of(st.none(), _texts))
            out.append({'role': 'assistant', 'content': content, 'tool_calls': calls})
            out.extend({'role': 'tool', 'tool_call_id': i, 'content': draw(_texts)} for i in ids)
        out.append({'role': 'assistant', 'content': draw(_texts)})
    return out


@settings(max_examples=examples(100), deadline=None)
@given(chats())
def test_any_chat_round_trips(chat: list[dict[str, Any]]) -> None:
    history = from_openai(chat)
    assert to_openai(history) == chat
    # A valid history: normalize changes nothing once a next request follows the last answer.
    extended = [*history, ModelRequest(parts=[UserPromptPart('next')])]
    assert normalize(extended) == extended


@pytest.mark.parametrize('fn', [from_openai, to_openai], ids=lambda f: f.__name__)
def test_docstring_example_runs(fn: Any) -> None:
    doc = inspect.getdoc(fn) or ''
    assert doc.split('\n')[0].endswith('.')
    [block] = re.findall(r'```python\n(.*?)```', doc, flags=re.DOTALL)
    exec(compile(textwrap.dedent(block), f'<{fn.__name__} example>', 'exec'), {'__name__': 'example'})
