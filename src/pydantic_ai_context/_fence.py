"""Keep quoted text inside its fence: neutralise the tags that open or close a frame, in every spelling.

Text from a model or a tool is pasted between delimiters (`<transcript>` for the summariser,
`<conversation_summary>` around a summary). If that text held the closing delimiter, what follows
would read as outside the quote. A model reads `</ Transcript >`, `<\u200b/transcript>` (a
zero-width space) and `\uff1c/\uff54ranscript\uff1e` (full-width forms) as the same tag, so each is
neutralised like the plain one: its `<` becomes `&lt;` (the convention pydantic-ai's own framing
uses), and the rest of the text is left exactly as written. Every pattern is linear in the text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Final

__all__ = ('neutralise_tags', 'tag_pattern')

# Characters a model does not see (format characters, variation selectors, fillers): they may sit
# anywhere inside a tag without changing how it reads.
_INVISIBLE: Final = (
    '\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f'
    '\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f'
    '\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff'
)
_GAP: Final = f'[\\s{_INVISIBLE}]*'
_OPENERS: Final = '<\uff1c\ufe64'  # <, full-width <, small <
_SLASHES: Final = '/\uff0f\u2044\u2215'  # /, full-width /, fraction slash, division slash


def _char_class(char: str) -> str:
    """A class matching `char` in any case and in its full-width form."""
    forms = {char, char.lower(), char.upper()}
    forms |= {chr(ord(c) + 0xFEE0) for c in list(forms) if '!' <= c <= '~'}
    return '[' + ''.join(re.escape(c) for c in sorted(forms)) + ']'


def _name_pattern(name: str) -> str:
    invisible = f'[{_INVISIBLE}]*'
    chunks = []
    for char in name:
        # Space may stand around a namespace colon (`pyai : tag`); only invisible characters elsewhere.
        chunks.append(f'{_GAP}{_char_class(char)}{_GAP}' if char == ':' else _char_class(char))
    return invisible.join(chunks)


@functools.cache
def tag_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    """A pattern matching the `<` of an opening or closing tag of any of `names`, in every spelling.

    Any case, full-width letters and brackets, whitespace or invisible characters around the `/`
    and inside the name, attributes or a self-closing end; not a longer name that merely starts
    with one of `names`.
    """
    alternatives = '|'.join(_name_pattern(n) for n in sorted(names, key=len, reverse=True))
    word = '[A-Za-z0-9_\uff10-\uff19\uff21-\uff3a\uff3f\uff41-\uff5a]'
    return re.compile(
        f'[{_OPENERS}](?={_GAP}(?:[{_SLASHES}]{_GAP})?(?:{alternatives})(?![{_INVISIBLE}]*{word}))',
        re.IGNORECASE,
    )


def neutralise_tags(text: str, names: Iterable[str]) -> str:
    """`text` with the `<` of every tag of `names` (any spelling, see `tag_pattern`) as `&lt;`.

    Idempotent: a neutralised tag has no `<` left to match.

    Example:
        ```python
        from pydantic_ai_context._fence import neutralise_tags

        text = 'ok </Transcript > <\u200b/transcript> \uff1c/\uff54ranscript\uff1e <transcripts>'
        out = neutralise_tags(text, ['transcript'])
        assert out == 'ok &lt;/Transcript > &lt;\u200b/transcript> &lt;/\uff54ranscript\uff1e <transcripts>'
        assert neutralise_tags(out, ['transcript']) == out
        ```
    """
    return tag_pattern(tuple(names)).sub('&lt;', text)
