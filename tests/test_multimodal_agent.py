"""A realistic multimodal agent (DESIGN.md section 7): images and PDFs in the prompt, returned by
tools on their own and inside `ToolReturn(..., content=[...])`, over 20+ steps, where the model
function measures each request's whole total and nothing may exceed the window."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import ToolReturn
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.tools import Tool

from pydantic_ai_context import profile
from pydantic_ai_context._attachments import image_tokens, provider_of
from pydantic_ai_context._parts import is_binary_item
from pydantic_ai_context.tokens import default_counter

from .media import jpeg, pdf, png
from .realistic import SHORT_INSTRUCTIONS, RequestMeter, prose, read_file, realistic_agent

WINDOW = 32_000
SUMMARISER = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart('A short summary.')]))
STEPS = 24


def screenshot(page: str) -> BinaryContent:
    """Take a screenshot of a page of the application (a 1200 x 900 PNG)."""
    return BinaryContent(png(1200, 900), media_type='image/png')


def photo(name: str) -> BinaryContent:
    """Fetch a photo from the asset store (a 1600 x 1200 JPEG)."""
    return BinaryContent(jpeg(1600, 1200), media_type='image/jpeg')


def open_report(path: str) -> ToolReturn:
    """Open a two-page PDF report; the tool's result says so, the document follows it."""
    return ToolReturn(
        f'opened {path} (2 pages)',
        content=[f'The report {path}:', BinaryContent(pdf(2), media_type='application/pdf')],
    )


def read_notes(path: str) -> str:
    """Read a text file of notes."""
    return prose(600, seed=len(path))


TOOLS: dict[str, Any] = {
    'screenshot': ('page', screenshot),
    'photo': ('name', photo),
    'open_report': ('path', open_report),
    'read_notes': ('path', read_notes),
    'read_file': ('path', read_file),
}
ORDER = ['screenshot', 'read_file', 'open_report', 'photo', 'read_notes', 'screenshot', 'read_file']


def multimodal_script(n: int, messages: list[ModelMessage]) -> ModelResponse:
    if n <= STEPS:
        name = ORDER[n % len(ORDER)]
        arg, _ = TOOLS[name]
        calls = [ToolCallPart(name, {arg: f'item_{n:02d}'}, tool_call_id=f'c{n}')]
        if n % 5 == 0:  # a parallel screenshot now and then
            calls.append(ToolCallPart('screenshot', {'page': f'extra_{n}'}, tool_call_id=f'x{n}'))
        return ModelResponse(parts=[TextPart(f'Step {n}.'), *calls])
    return ModelResponse(parts=[TextPart('Reviewed everything.')])


def attachments(messages: list[ModelMessage]) -> int:
    items = 0
    for message in messages:
        for part in message.parts:
            content = getattr(part, 'content', None)
            if isinstance(content, list):
                items += sum(1 for item in content if is_binary_item(item))
            elif is_binary_item(content):
                items += 1
    return items


@pytest.mark.parametrize(
    'billed_by', ['anthropic:claude-sonnet-4-5', 'openai:gpt-4o', 'google-gla:gemini-2.5-pro']
)
@pytest.mark.parametrize('name', ['coding', 'chat', 'long_horizon'])
def test_a_multimodal_agent_never_exceeds_its_window(name: str, billed_by: str) -> None:
    # The model function weighs each request as `billed_by` would bill its attachments; the profile
    # serves an unknown model (a FunctionModel), so it counts them high: never below any provider.
    meter = RequestMeter(multimodal_script, counter=default_counter(billed_by))
    agent = realistic_agent(
        meter,
        profile(name, context_window=WINDOW, summary_model=SUMMARISER),
        tools=5,
        instructions=SHORT_INSTRUCTIONS,
        extra_tools=[Tool(fn, takes_ctx=False) for _, fn in TOOLS.values() if fn is not read_file],
    )
    prompt: list[Any] = [
        'Review the app and its reports.',
        BinaryContent(png(800, 600), media_type='image/png'),
    ]
    result = agent.run_sync(prompt)
    assert result.output == 'Reviewed everything.'
    assert len(meter.totals) == STEPS + 1
    assert max(meter.totals) <= WINDOW, meter.totals
    # The attachments are counted as billed, not as a flat 765: all the steps together are far over
    # the window (on 1.x the view replaces the history, so the steps are read from what was sent).
    sent = {id(p): p for seen in meter.seen for m in seen for p in m.parts}
    steps = [ModelRequest(parts=[p]) for p in sent.values() if not isinstance(p, ToolCallPart | TextPart)]
    assert attachments(steps) >= 15
    assert default_counter().count_messages(steps) > 2 * WINDOW
    # Each request measured by the model function carries attachments, and sees its prompt's image.
    assert all(attachments(seen) >= 1 for seen in meter.seen)
    provider = provider_of(billed_by)
    first_step = image_tokens(800, 600, provider) + image_tokens(1200, 900, provider)
    assert meter.counter.count_messages(meter.seen[1]) >= first_step
