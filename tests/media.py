"""Small, valid image and PDF files made in memory (struct and zlib), for tests of attachment sizing."""

from __future__ import annotations

import functools
import struct
import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


@functools.lru_cache(maxsize=32)
def png(width: int, height: int) -> bytes:
    """A black RGB PNG of `width` × `height` pixels (decodable: IHDR, IDAT, IEND with their CRCs)."""
    header = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)
    rows = (b'\x00' + b'\x00' * (3 * width)) * height
    return (
        b'\x89PNG\r\n\x1a\n'
        + _chunk(b'IHDR', header)
        + _chunk(b'IDAT', zlib.compress(rows, 9))
        + _chunk(b'IEND', b'')
    )


def jpeg(width: int, height: int) -> bytes:
    """A baseline JPEG's segments up to its scan: SOI, APP0 (JFIF), DQT, SOF0, then SOS and EOI."""
    app0 = b'JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00'
    dqt = b'\x00' + bytes(range(1, 65))
    sof = struct.pack('>BHHB', 8, height, width, 1) + b'\x01\x11\x00'
    sos = b'\x01\x01\x00\x00\x3f\x00'

    def segment(marker: int, body: bytes) -> bytes:
        return bytes([0xFF, marker]) + struct.pack('>H', len(body) + 2) + body

    return (
        b'\xff\xd8'
        + segment(0xE0, app0)
        + segment(0xDB, dqt)
        + segment(0xC0, sof)
        + segment(0xDA, sos)
        + b'\x00\xff\xd9'
    )


def gif(width: int, height: int) -> bytes:
    """A one-colour GIF89a."""
    return (
        b'GIF89a' + struct.pack('<HHBBB', width, height, 0x80, 0, 0) + b'\x00\x00\x00\xff\xff\xff'
        b',' + struct.pack('<HHHHB', 0, 0, width, height, 0) + b'\x02\x02\x44\x01\x00;'
    )


def webp(width: int, height: int) -> bytes:
    """An extended-format (VP8X) WebP header."""
    body = b'VP8X' + struct.pack('<I', 10) + b'\x00\x00\x00\x00' + (width - 1).to_bytes(3, 'little')
    body += (height - 1).to_bytes(3, 'little')
    return b'RIFF' + struct.pack('<I', len(body) + 4) + b'WEBP' + body


def pdf(pages: int, *, compressed: bool = False) -> bytes:
    """A PDF of `pages` empty US-letter pages; `compressed` puts the page objects in a Flate-compressed
    object stream (PDF 1.5), where a plain scan of the file cannot see them."""
    kids = ' '.join(f'{3 + i} 0 R' for i in range(pages))
    page_objects = ['<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>' for _ in range(pages)]
    out = [b'%PDF-1.5\n%\xe2\xe3\xcf\xd3\n']
    offsets: list[int] = []

    def add(number: int, body: bytes) -> None:
        offsets.append(sum(map(len, out)))
        out.append(b'%d 0 obj\n' % number + body + b'\nendobj\n')

    add(1, b'<< /Type /Catalog /Pages 2 0 R >>')
    if compressed:
        # The page tree's /Count is inside the stream too: only inflating it shows the pages.
        objects = [f'<< /Type /Pages /Kids [{kids}] /Count {pages} >>', *page_objects]
        index = ' '.join(f'{2 + i} {sum(len(o) + 1 for o in objects[:i])}' for i in range(len(objects)))
        data = zlib.compress((index + '\n' + '\n'.join(objects)).encode())
        header = f'<< /Type /ObjStm /N {len(objects)} /First {len(index) + 1} /Filter /FlateDecode /Length {len(data)} >>'
        add(3 + pages, header.encode() + b'\nstream\n' + data + b'\nendstream')
    else:
        add(2, f'<< /Type /Pages /Kids [{kids}] /Count {pages} >>'.encode())
        for i, body in enumerate(page_objects):
            add(3 + i, body.encode())
    start = sum(map(len, out))
    xref = [b'xref\n0 %d\n0000000000 65535 f \n' % (len(offsets) + 1)]
    xref += [b'%010d 00000 n \n' % o for o in offsets]
    out += xref
    out.append(b'trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n' % (len(offsets) + 1, start))
    return b''.join(out)
