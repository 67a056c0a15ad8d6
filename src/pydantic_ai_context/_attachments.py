"""What an attachment costs the provider that serves the request: images by their size, PDFs by
their pages, URLs by a stated estimate.

Image dimensions are read from the file's own header (PNG, JPEG, GIF, WebP), never by decoding it;
a PDF's pages are counted from its page objects. Anything unreadable (a truncated or unknown format,
junk bytes) counts as the largest image or a stated number of pages: high rather than low, since a
count too low is a request the provider rejects. Usage anchoring replaces every estimate here by
the provider's own measure once a response reports it.

Per provider (`provider_of` tells which from the model):

| provider | image | PDF page |
|---|---|---|
| `anthropic` | `w × h / 750`, scaled to a long edge ≤ 1568 px and ≤ 1.15 MP | 2,500 |
| `openai` | `85 + 170 × tiles` of 512 px (fit 2048², short side ≤ 768); `low`: 85; mini/nano: patches | 1,500 |
| `google` | 258 a tile (one tile ≤ 384², else tiles of `min(w, h) / 1.5`); Gemini 3: 1,120 | 258 (3: 560) |
| unknown | the largest of the three | 3,000 |

A URL attachment is not fetched: an image URL counts as `UNKNOWN_IMAGE_TOKENS`, a document URL as
`URL_DOCUMENT_PAGES` pages. Audio and video count `MEDIA_TOKENS` each (their length is unknown).
A text document (`text/*`, JSON, XML...) counts as its decoded text.
"""

from __future__ import annotations

import math
import re
import struct
import zlib
from base64 import b64decode
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ._encodings import _OPENAI_MODEL, _model_name
from ._memo import ObjectMemo

if TYPE_CHECKING:
    from pydantic_ai.models import Model

__all__ = (
    'MEDIA_TOKENS',
    'PDF_PAGE_TOKENS',
    'UNKNOWN_IMAGE_TOKENS',
    'URL_DOCUMENT_PAGES',
    'attachment_tokens',
    'image_size',
    'image_tokens',
    'pdf_pages',
    'pricing_of',
    'provider_of',
)

UNKNOWN_IMAGE_TOKENS: Final = 1_600
"""An image whose size cannot be read: Anthropic's largest (about 1.15 megapixels), above OpenAI's
largest high-detail image (1,445) and Gemini 3's default (1,120)."""

PDF_PAGE_TOKENS: Final = {'anthropic': 2_500, 'openai': 1_500, 'google': 258, None: 3_000}
"""Tokens counted per PDF page, per provider (`None`: unknown). Anthropic bills 1,500-3,000 a page
(each page's text plus an image of it), OpenAI the text plus an image of each page, Gemini 258 a
page (560 on Gemini 3, by its default media resolution)."""

GEMINI3_PAGE_TOKENS: Final = 560
GEMINI3_IMAGE_TOKENS: Final = 1_120

URL_DOCUMENT_PAGES: Final = 4
"""Pages counted for a document given by URL (not fetched: its length is unknown)."""

UNREADABLE_PDF_BYTES_PER_PAGE: Final = 50_000
"""A PDF whose pages cannot be counted counts one page per this many bytes (at least one)."""

MEDIA_TOKENS: Final = 765
"""Audio or video, by bytes or URL: a flat count (their duration is not read)."""

_MAX_SCAN: Final = 64 * 1024 * 1024
"""Bytes of one attachment read at most (a PDF's page objects, a JPEG's segments)."""
_MAX_INFLATED: Final = 16 * 1024 * 1024
"""Bytes inflated at most from a PDF's compressed object streams."""

_TEXT_TYPES: Final = re.compile(r'^(text/|application/(json|xml|x-yaml|yaml|javascript|x-python|csv))')


def provider_of(model: str | Model | None) -> str | None:
    """Whose attachment pricing applies to `model`: `'anthropic'`, `'openai'`, `'google'`, or `None`.

    Example:
        ```python
        from pydantic_ai_context._attachments import provider_of

        assert provider_of('anthropic:claude-sonnet-4-5') == 'anthropic'
        assert provider_of('openai:gpt-4o') == 'openai'
        assert provider_of('google-gla:gemini-2.5-pro') == 'google'
        assert provider_of(None) is None and provider_of('test') is None
        ```
    """
    name = _model_name(model) or ''
    system = '' if model is None or isinstance(model, str) else str(getattr(model, 'system', '') or '')
    if 'claude' in name or system == 'anthropic':
        return 'anthropic'
    if 'gemini' in name or system.startswith('google'):
        return 'google'
    if (name and _OPENAI_MODEL.match(name)) or system in {'openai', 'azure'}:
        return 'openai'
    return None


def pricing_of(model: str | Model | None) -> tuple[str | None, bool, bool]:
    """What decides a model's attachment counts: its provider, and whether it follows Gemini 3's flat
    rates or OpenAI's 32 px patches (models alike in these count attachments alike)."""
    name = _model_name(model) or ''
    return provider_of(model), 'gemini-3' in name, any(patch in name for patch in _PATCH_MODELS)


def image_tokens(
    width: int, height: int, provider: str | None, *, model: str = '', detail: Any = None
) -> int:
    """The tokens an image of `width` × `height` pixels costs `provider` (`None`: the largest).

    Example:
        ```python
        from pydantic_ai_context._attachments import image_tokens

        assert image_tokens(1000, 1000, 'anthropic') == 1334
        assert image_tokens(1024, 1024, 'openai') == 765
        assert image_tokens(300, 300, 'google') == 258
        ```
    """
    if width <= 0 or height <= 0:
        return UNKNOWN_IMAGE_TOKENS
    if provider == 'anthropic':
        return _anthropic(width, height)
    if provider == 'openai':
        if any(name in model for name in _PATCH_MODELS):
            return _openai_patches(width, height)
        return 85 if detail == 'low' else _openai(width, height)
    if provider == 'google':
        return GEMINI3_IMAGE_TOKENS if 'gemini-3' in model else _gemini(width, height)
    return max(_anthropic(width, height), _openai(width, height), _gemini(width, height))


def _anthropic(width: int, height: int) -> int:
    # Scaled down (aspect kept) to a long edge of at most 1568 px and about 1.15 megapixels.
    scale = min(1.0, 1568 / max(width, height), math.sqrt(1_150_000 / (width * height)))
    w, h = max(1, int(width * scale)), max(1, int(height * scale))
    return max(1, math.ceil(w * h / 750))


def _openai(width: int, height: int) -> int:
    # High detail: fit 2048 x 2048, then a shortest side of at most 768, then 512 px tiles.
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        s = 2048 / max(w, h)
        w, h = w * s, h * s
    if min(w, h) > 768:
        s = 768 / min(w, h)
        w, h = w * s, h * s
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return 85 + 170 * tiles


_PATCH_MODELS: Final = ('gpt-4.1-mini', 'gpt-4.1-nano', 'o4-mini', 'gpt-5-mini', 'gpt-5-nano')
"""OpenAI models that read an image as 32 px patches (at most 1,536) rather than 512 px tiles."""


def _openai_patches(width: int, height: int) -> int:
    return min(math.ceil(width / 32) * math.ceil(height / 32), 1536)


def _gemini(width: int, height: int) -> int:
    if width <= 384 and height <= 384:
        return 258
    unit = min(max(math.floor(min(width, height) / 1.5), 256), 768)
    return 258 * math.ceil(width / unit) * math.ceil(height / unit)


# --- reading sizes -------------------------------------------------------------------------------


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, JPEG, GIF or WebP header, or `None` when it cannot be read.

    Example:
        ```python
        import struct

        from pydantic_ai_context._attachments import image_size

        png = b'\\x89PNG\\r\\n\\x1a\\n' + struct.pack('>I', 13) + b'IHDR' + struct.pack('>II', 640, 480)
        assert image_size(png + b'\\x08\\x02\\x00\\x00\\x00') == (640, 480)
        assert image_size(b'not an image') is None
        ```
    """
    try:
        if data[:8] == b'\x89PNG\r\n\x1a\n' and data[12:16] == b'IHDR':
            return _positive(*struct.unpack('>II', data[16:24]))
        if data[:6] in (b'GIF87a', b'GIF89a'):
            return _positive(*struct.unpack('<HH', data[6:10]))
        if data[:4] == b'RIFF' and data[8:12] == b'WEBP':
            return _webp(data)
        if data[:2] == b'\xff\xd8':
            return _jpeg(data)
    except (struct.error, IndexError, ValueError):
        return None
    return None


def _positive(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if width > 0 and height > 0 else None


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b'VP8X':
        w = int.from_bytes(data[24:27], 'little') + 1
        h = int.from_bytes(data[27:30], 'little') + 1
        return _positive(w, h)
    if chunk == b'VP8L' and data[20:21] == b'\x2f':
        bits = int.from_bytes(data[21:25], 'little')
        return _positive((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b'VP8 ' and data[23:26] == b'\x9d\x01\x2a':
        w, h = struct.unpack('<HH', data[26:30])
        return _positive(w & 0x3FFF, h & 0x3FFF)
    return None


_SOF: Final = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg(data: bytes) -> tuple[int, int] | None:
    # Walk the segments (each names its length) to the first start-of-frame: linear, bounded.
    i, end = 2, min(len(data), _MAX_SCAN)
    while i + 4 <= end:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        (length,) = struct.unpack('>H', data[i + 2 : i + 4])
        if length < 2:
            return None
        if marker in _SOF:
            h, w = struct.unpack('>HH', data[i + 5 : i + 9])
            return _positive(w, h)
        i += 2 + length
    return None


_PAGE: Final = re.compile(rb'/Type\s*/Page(?![A-Za-z])')
_COUNT: Final = re.compile(
    rb'/Type\s*/Pages\b[^>]{0,512}?/Count\s+(\d{1,7})|/Count\s+(\d{1,7})[^>]{0,512}?/Type\s*/Pages\b'
)
_OBJSTM: Final = re.compile(rb'/Type\s*/ObjStm\b')
_STREAM: Final = re.compile(rb'stream\r?\n')


def pdf_pages(data: bytes) -> int | None:
    """The pages of a PDF, counted from its page objects (also inside compressed object streams),
    else from its page tree's `/Count`; `None` when it holds neither (not a PDF, or junk).

    Example:
        ```python
        from pydantic_ai_context._attachments import pdf_pages

        pdf = b'%PDF-1.4\\n' + b''.join(b'%d 0 obj << /Type /Page >> endobj\\n' % i for i in range(3))
        assert pdf_pages(pdf) == 3
        assert pdf_pages(b'junk') is None
        ```
    """
    head = data[:_MAX_SCAN]
    pages = len(_PAGE.findall(head))
    counts = [int(a or b) for a, b in _COUNT.findall(head)]
    if not pages and _OBJSTM.search(head):
        inflated = _inflated_object_streams(head)
        pages = len(_PAGE.findall(inflated))
        counts += [int(a or b) for a, b in _COUNT.findall(inflated)]
    found = max([pages, *counts])
    return found or None


def _inflated_object_streams(data: bytes) -> bytes:
    """The inflated content of the compressed object streams of `data`, up to `_MAX_INFLATED` bytes."""
    out: list[bytes] = []
    budget = _MAX_INFLATED
    for match in _OBJSTM.finditer(data):
        start = _STREAM.search(data, match.end(), match.end() + 4096)
        if start is None:
            continue
        inflater = zlib.decompressobj()
        try:
            chunk = inflater.decompress(data[start.end() : start.end() + budget], budget)
        except zlib.error:
            continue
        out.append(chunk)
        budget -= len(chunk)
        if budget <= 0:
            break
    return b''.join(out)


# --- one attachment -------------------------------------------------------------------------------

_COUNTS: ObjectMemo[int] = ObjectMemo(
    max_bytes=4 * 1024 * 1024, fields=('data', 'media_type', 'url', 'vendor_metadata')
)
"""Each attachment's count per provider, while the item lives unchanged (its bytes are read once)."""


def attachment_tokens(
    item: Any, provider: str | None, count_text: Callable[[str], int], *, model: str = ''
) -> int:
    """The tokens one attachment (`BinaryContent`, `ImageUrl`, `DocumentUrl`, ...) costs `provider`.

    Example:
        ```python
        from pydantic_ai.messages import DocumentUrl

        from pydantic_ai_context._attachments import attachment_tokens

        assert attachment_tokens(DocumentUrl('https://example.com/a.pdf'), 'anthropic', len) == 4 * 2_500
        ```
    """
    key = (provider, model)
    found = _COUNTS.get(item, key)
    if found is None:
        found = _COUNTS.put(item, _tokens(item, provider, count_text, model), key)
    return found


def _tokens(item: Any, provider: str | None, count_text: Callable[[str], int], model: str) -> int:
    kind = getattr(item, 'kind', None)
    media = str(_media_type(item) or '')
    detail = (getattr(item, 'vendor_metadata', None) or {}).get('detail')
    data = getattr(item, 'data', None)
    if data is None:
        data = _data_url(getattr(item, 'url', None))
    page = PDF_PAGE_TOKENS.get(provider, PDF_PAGE_TOKENS[None])
    if provider == 'google' and 'gemini-3' in model:
        page = GEMINI3_PAGE_TOKENS
    if media.startswith('image/') or kind == 'image-url':
        size = image_size(data) if isinstance(data, bytes) else None
        if size is None:
            return 85 if provider == 'openai' and detail == 'low' else UNKNOWN_IMAGE_TOKENS
        return image_tokens(*size, provider, model=model, detail=detail)
    if media.startswith(('audio/', 'video/')) or kind in {'audio-url', 'video-url'}:
        return MEDIA_TOKENS
    if isinstance(data, bytes) and _TEXT_TYPES.match(media):
        return count_text(data[:_MAX_SCAN].decode('utf-8', 'replace'))
    if isinstance(data, bytes) and (media == 'application/pdf' or data[:5] == b'%PDF-'):
        pages = pdf_pages(data) or max(1, math.ceil(len(data) / UNREADABLE_PDF_BYTES_PER_PAGE))
        return page * pages
    return page * URL_DOCUMENT_PAGES


def _media_type(item: Any) -> str | None:
    try:
        return getattr(item, 'media_type', None)
    except Exception:  # a URL whose type cannot be inferred from its extension
        return None


def _data_url(url: Any) -> bytes | None:
    """The bytes of a `data:` URL, else `None` (other URLs are not fetched)."""
    if not isinstance(url, str) or not url.startswith('data:') or ';base64,' not in url[:200]:
        return None
    try:
        return b64decode(url.split(',', 1)[1][: _MAX_SCAN * 4 // 3], validate=False)
    except ValueError:
        return None
