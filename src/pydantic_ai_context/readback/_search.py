"""BM25 ranking of a few thousand texts for `search_context`, by SQLite's FTS5.

FTS5 ships with the `sqlite3` module of standard Python builds, ranks with Okapi BM25 (`bm25()`)
and cuts snippets around the matches (`snippet()`), so read-back search needs no dependency.
(bm25s and rank-bm25 both need numpy, about 16 MB, for an index this package builds per search
over one conversation.) Where a Python's SQLite lacks FTS5, a plain term-frequency ranking
stands in, with a warning once.
"""

from __future__ import annotations

import logging
import math
import re
import sqlite3
from collections.abc import Sequence
from typing import Final

__all__ = ('query_terms', 'rank')

logger = logging.getLogger('pydantic_ai_context._search')

MAX_TERMS: Final = 32
SNIPPET_TOKENS: Final = 16
_FALLBACK_SNIPPET_CHARS: Final = 100
_WORD: Final = re.compile(r'[^\W_]+')
"""A term as FTS5's default `unicode61` tokenizer splits them: letters and digits (`_` separates)."""

_fts5: bool | None = None


def query_terms(query: str) -> list[str]:
    """The distinct words of `query`, lowercased, at most `MAX_TERMS`."""
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))[:MAX_TERMS]


def rank(texts: Sequence[str], query: str, limit: int) -> list[tuple[int, str]]:
    """The best `limit` texts for `query`, best first, as (index into `texts`, snippet).

    A text matches when it holds any word of the query; BM25 ranks texts holding more of the
    words, and rarer ones, higher. Empty when nothing matches or the query has no words.
    """
    terms = query_terms(query)
    if not terms or not texts or limit < 1:
        return []
    if _has_fts5():
        return _rank_fts5(texts, terms, limit)
    return _rank_plain(texts, terms, limit)


def _has_fts5() -> bool:
    global _fts5
    if _fts5 is None:
        try:
            with sqlite3.connect(':memory:') as conn:
                conn.execute('CREATE VIRTUAL TABLE t USING fts5(body)')
            _fts5 = True
        except sqlite3.OperationalError:
            logger.warning('SQLite has no FTS5: search_context ranks by plain term counts instead of BM25')
            _fts5 = False
    return _fts5


def _rank_fts5(texts: Sequence[str], terms: list[str], limit: int) -> list[tuple[int, str]]:
    match = ' OR '.join('"{}"'.format(t.replace('"', '""')) for t in terms)
    conn = sqlite3.connect(':memory:')
    try:
        conn.execute('CREATE VIRTUAL TABLE docs USING fts5(body)')
        conn.executemany(
            'INSERT INTO docs(rowid, body) VALUES (?, ?)', ((i, _sqlite_text(t)) for i, t in enumerate(texts))
        )
        rows = conn.execute(
            f"SELECT rowid, snippet(docs, 0, '', '', ' … ', {SNIPPET_TOKENS}) FROM docs "
            'WHERE docs MATCH ? ORDER BY bm25(docs), rowid LIMIT ?',
            (match, limit),
        ).fetchall()
    finally:
        conn.close()
    return [(int(rowid), _one_line(snippet)) for rowid, snippet in rows]


def _sqlite_text(text: str) -> str:
    """`text` as SQLite can hold it: a lone surrogate (a tool that decoded bytes with
    `surrogateescape`) cannot be encoded to UTF-8, so it becomes U+FFFD in the index only."""
    try:
        text.encode('utf-8')
    except UnicodeEncodeError:
        return text.encode('utf-8', 'surrogatepass').decode('utf-8', 'replace')
    return text


def _rank_plain(texts: Sequence[str], terms: list[str], limit: int) -> list[tuple[int, str]]:
    counts = [{t: len(re.findall(re.escape(t), text.lower())) for t in terms} for text in texts]
    n = len(texts)
    idf = {t: math.log(1 + n / (1 + sum(1 for c in counts if c[t]))) for t in terms}
    scored = [(sum(idf[t] * min(c[t], 3) for t in terms), i) for i, c in enumerate(counts) if any(c.values())]
    scored.sort(key=lambda s: (-s[0], s[1]))
    out: list[tuple[int, str]] = []
    for _, i in scored[:limit]:
        lower = texts[i].lower()
        at = min((lower.find(t) for t in terms if t in lower), default=0)
        start = max(at - _FALLBACK_SNIPPET_CHARS // 3, 0)
        out.append((i, _one_line(texts[i][start : start + _FALLBACK_SNIPPET_CHARS])))
    return out


def _one_line(text: str) -> str:
    return ' ⏎ '.join(line.strip() for line in text.strip().splitlines() if line.strip())
