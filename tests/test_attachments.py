"""Attachments are counted as the serving provider bills them: images by their size, PDFs by their
pages, URLs by a stated estimate; what cannot be read counts high, never as free."""

from __future__ import annotations

import base64
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelRequest,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_context import HeuristicCounter, TiktokenCounter
from pydantic_ai_context._attachments import (
    PDF_PAGE_TOKENS,
    UNKNOWN_IMAGE_TOKENS,
    URL_DOCUMENT_PAGES,
    attachment_tokens,
    image_size,
    image_tokens,
    pdf_pages,
    provider_of,
)
from pydantic_ai_context.tokens import MESSAGE_OVERHEAD_TOKENS, PART_OVERHEAD_TOKENS, default_counter

from ._examples import examples
from .media import gif, jpeg, pdf, png, webp

PROVIDERS = ('anthropic', 'openai', 'google', None)


@pytest.mark.parametrize('make', [png, jpeg, gif, webp])
@pytest.mark.parametrize('size', [(1, 1), (1200, 900), (900, 1200), (4000, 3000), (16383, 2)])
def test_image_size_is_read_from_the_header(make, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert image_size(make(*size)) == size


@pytest.mark.parametrize(
    'data',
    [
        b'',
        b'\x89PNG\r\n\x1a\n',  # cut short
        b'\xff\xd8\xff\xe0\x00\x01',  # a segment length below 2
        b'\xff\xd8' + b'\xff\xe0\xff\xff' * 3,  # segments running past the end
        b'\xff\xd8\x00\x00\x00\x00',  # not a marker
        b'GIF89a\x00\x00\x00\x00',  # zero size
        b'RIFF\x00\x00\x00\x00WEBPVP8Z',  # an unknown WebP chunk
        b'BM' + b'\x00' * 50,  # BMP: not read
        b'<svg width="10" height="10"/>',
    ],
)
def test_an_unreadable_header_gives_no_size(data: bytes) -> None:
    assert image_size(data) is None


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=64), st.sampled_from([b'', b'\x89PNG\r\n\x1a\n', b'\xff\xd8', b'GIF89a', b'RIFF']))
def test_any_bytes_give_a_size_or_none_and_never_raise(tail: bytes, head: bytes) -> None:
    size = image_size(head + tail)
    assert size is None or (size[0] > 0 and size[1] > 0)
    assert pdf_pages(head + tail) is None or pdf_pages(head + tail) >= 1  # type: ignore[operator]


def test_a_jpeg_scan_is_linear_in_its_segments() -> None:
    # 100k minimal segments before any frame: walked once, no size found.
    data = b'\xff\xd8' + b'\xff\xe1\x00\x02' * 100_000
    assert image_size(data) is None


@pytest.mark.parametrize(
    ('provider', 'size', 'tokens'),
    [
        ('anthropic', (200, 200), 54),
        ('anthropic', (1000, 1000), 1334),
        ('anthropic', (1200, 900), 1440),
        ('anthropic', (4000, 3000), 1532),  # scaled down to about 1.15 megapixels
        ('anthropic', (3000, 400), 437),  # scaled to a long edge of 1568
        ('openai', (1024, 1024), 765),
        ('openai', (2048, 4096), 1105),
        ('openai', (512, 512), 255),
        ('openai', (1200, 900), 765),
        ('google', (300, 300), 258),
        ('google', (1200, 900), 1032),
        ('google', (1024, 1024), 1032),
    ],
)
def test_image_tokens_follow_each_providers_published_formula(
    provider: str, size: tuple[int, int], tokens: int
) -> None:
    assert image_tokens(*size, provider) == tokens


@pytest.mark.parametrize('size', [(200, 200), (1200, 900), (4000, 3000), (300, 5000)])
def test_an_unknown_provider_counts_an_image_as_the_highest_of_them(size: tuple[int, int]) -> None:
    unknown = image_tokens(*size, None)
    assert unknown == max(image_tokens(*size, p) for p in ('anthropic', 'openai', 'google'))


def test_openai_patch_models_count_32_px_patches() -> None:
    assert image_tokens(1200, 900, 'openai', model='gpt-4.1-mini') == 38 * 29
    assert image_tokens(4000, 3000, 'openai', model='o4-mini') == 1536
    assert image_tokens(1200, 900, 'openai', model='gpt-4o') == 765
    image = BinaryContent(png(1200, 900), media_type='image/png')
    assert attachment_tokens(image, 'openai', len, model='gpt-5-nano-2025-08-07') == 38 * 29
    # The process-wide counters of models priced alike are shared, of others not.
    message = ModelRequest(parts=[UserPromptPart([image])])
    tiles, patches = default_counter('openai:gpt-4o'), default_counter('openai:gpt-4.1-mini')
    assert tiles is not patches
    assert patches.count_message(message) - tiles.count_message(message) == 38 * 29 - 765


def test_openai_low_detail_and_gemini_3() -> None:
    image = BinaryContent(png(1200, 900), media_type='image/png', vendor_metadata={'detail': 'low'})
    assert attachment_tokens(image, 'openai', len) == 85
    assert (
        attachment_tokens(
            BinaryContent(png(100, 100), media_type='image/png'), 'google', len, model='gemini-3-pro'
        )
        == 1120
    )


@pytest.mark.parametrize('compressed', [False, True])
def test_pdf_pages_are_counted_even_inside_compressed_object_streams(compressed: bool) -> None:
    for pages in (1, 2, 20):
        assert pdf_pages(pdf(pages, compressed=compressed)) == pages


@pytest.mark.parametrize(
    'data', [b'', b'%PDF-1.4\n', b'junk /Type /Pagesx', b'%PDF /Type /ObjStm stream\n\x00\x01']
)
def test_a_pdf_without_pages_gives_none(data: bytes) -> None:
    assert pdf_pages(data) is None


def test_a_20_page_pdf_counts_at_least_30k_tokens_for_anthropic() -> None:
    message = ModelRequest(
        parts=[UserPromptPart(['Summarise this.', BinaryContent(pdf(20), media_type='application/pdf')])]
    )
    for counter in (
        TiktokenCounter(model='anthropic:claude-sonnet-4-5'),
        default_counter('anthropic:claude-sonnet-4-5'),
        HeuristicCounter(model='claude-opus-4-1'),
        HeuristicCounter(),  # unknown provider: higher still
    ):
        assert counter.count_message(message) >= 30_000, counter
    assert TiktokenCounter(model='openai:gpt-4o').count_message(message) >= 20 * PDF_PAGE_TOKENS['openai']
    # The former flat count: 765 for any attachment.
    assert HeuristicCounter().count_message(message) > 765 * 20


def test_a_pdf_whose_pages_cannot_be_read_counts_a_page_per_50_kb() -> None:
    junk = b'%PDF-1.7\n' + bytes(range(256)) * 800  # ~200 KB, no page object
    item = BinaryContent(junk, media_type='application/pdf')
    assert attachment_tokens(item, 'anthropic', len) == 5 * PDF_PAGE_TOKENS['anthropic']


@pytest.mark.parametrize('provider', PROVIDERS)
def test_urls_count_a_stated_estimate(provider: str | None) -> None:
    page = PDF_PAGE_TOKENS[provider]
    assert attachment_tokens(ImageUrl('https://example.com/a.png'), provider, len) == UNKNOWN_IMAGE_TOKENS
    assert (
        attachment_tokens(DocumentUrl('https://example.com/a.pdf'), provider, len)
        == URL_DOCUMENT_PAGES * page
    )
    # A data URL carries its bytes: read like bytes.
    data_url = 'data:image/png;base64,' + base64.b64encode(png(1200, 900)).decode()
    assert attachment_tokens(ImageUrl(data_url), provider, len) == image_tokens(1200, 900, provider)


def test_an_unreadable_image_counts_as_the_largest() -> None:
    item = BinaryContent(b'\x89PNG\r\n\x1a\n' + b'\x00' * 10, media_type='image/png')
    assert attachment_tokens(item, 'openai', len) == UNKNOWN_IMAGE_TOKENS


def test_a_text_document_counts_its_text() -> None:
    text = 'name,value\n' + 'alpha,1\n' * 500
    item = BinaryContent(text.encode(), media_type='text/csv')
    counter = HeuristicCounter()
    assert attachment_tokens(item, None, counter.count_text) == counter.count_text(text)


def test_a_file_returned_by_a_tool_counts_as_the_file_not_as_its_base64() -> None:
    # A large PNG (its header says 1200 x 900) returned on its own: `return BinaryContent(...)`.
    data = png(1200, 900) + bytes(range(256)) * 4_000
    part = ToolReturnPart('screenshot', BinaryContent(data, media_type='image/png'), tool_call_id='c1')
    counter = TiktokenCounter(model='anthropic:claude-sonnet-4-5')
    assert counter.count_message(ModelRequest(parts=[part])) == (
        MESSAGE_OVERHEAD_TOKENS + PART_OVERHEAD_TOKENS + image_tokens(1200, 900, 'anthropic')
    )


def test_the_issue_8k_example_no_longer_fits() -> None:
    # A 20-page PDF and two 1200 x 900 images: counted at 5,354 before, several times an 8k window.
    message = ModelRequest(
        parts=[
            UserPromptPart(
                [
                    'Compare these.',
                    BinaryContent(pdf(20), media_type='application/pdf'),
                    BinaryContent(png(1200, 900), media_type='image/png'),
                    BinaryContent(jpeg(1200, 900), media_type='image/jpeg'),
                ]
            )
        ]
    )
    counter = TiktokenCounter(model='anthropic:claude-sonnet-4-5')
    assert counter.count_message(message) >= 20 * 2_500 + 2 * 1_440


@pytest.mark.parametrize(
    ('model', 'provider'),
    [
        ('anthropic:claude-sonnet-4-5', 'anthropic'),
        ('bedrock:us.anthropic.claude-3-7-sonnet', 'anthropic'),
        ('openai:gpt-4o', 'openai'),
        ('openai-responses:gpt-5', 'openai'),
        ('google-vertex:gemini-2.5-flash', 'google'),
        ('groq:llama-3.3-70b', None),
        (None, None),
    ],
)
def test_the_provider_comes_from_the_model(model: str | None, provider: str | None) -> None:
    assert provider_of(model) == provider
    assert default_counter(model).attachments == provider


def test_png_fixture_is_a_real_png() -> None:
    data = png(3, 2)
    assert data[:8] == b'\x89PNG\r\n\x1a\n'
    assert struct.unpack('>II', data[16:24]) == (3, 2)
