"""Store URLs and libpq connection strings as messages may show them: never a password.

Every repr, error and log line of this package that names a store URL or a PostgreSQL connection
string goes through `redact_url`, and every driver message that may echo one through `scrub`. Both
parse the way the URL's consumer does (`urllib.parse` for URLs, libpq's conninfo rules for
`key=value` strings), never with a pattern that stops at the first `/`, `?` or `#`:

- a URL keeps its scheme, host, port and path; the whole user info becomes `***` (a user name can
  be a token, and a password may hold `/`, `?`, `#` or `@`: everything up to the last `@` is user
  info); a query keeps the names and values of options that are never secret (`sslmode`, `host`,
  `port`, ...), other values become `***`, unknown names too; a fragment becomes `#***`;
- a conninfo string keeps the same safe keys' values; every other value becomes `***`;
- anything else (`postgresql:app:PW`) shows its scheme only.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import Final

__all__ = ('SAFE_KEYS', 'conninfo_pairs', 'redact_url', 'scrub', 'secrets_of')

SAFE_KEYS: Final = frozenset(
    {
        'host',
        'hostaddr',
        'port',
        'dbname',
        'user',
        'sslmode',
        'gssencmode',
        'channel_binding',
        'target_session_attrs',
        'load_balance_hosts',
        'application_name',
        'connect_timeout',
        'synchronous',
    }
)
"""Options whose values are never secret: shown as they are."""

_KNOWN_KEYS: Final = SAFE_KEYS | {
    'password',
    'passfile',
    'options',
    'sslkey',
    'sslcert',
    'sslrootcert',
    'sslpassword',
    'sslcrl',
    'service',
    'timeout',
    'require_auth',
    'krbsrvname',
    'keepalives',
}
"""Options whose names may be shown (with `***` for the value unless they are safe)."""

_MASK: Final = '***'


def _scheme(text: str) -> str | None:
    """The text before the first `:` if it is a URL scheme (RFC 3986: a letter, then letters,
    digits, `+`, `-`, `.`), else None."""
    scheme, colon, _ = text.partition(':')
    if not colon or not scheme or len(scheme) > 32 or not scheme[0].isascii() or not scheme[0].isalpha():
        return None
    if not all(c.isascii() and (c.isalnum() or c in '+-.') for c in scheme):
        return None
    return scheme


def _split_userinfo(rest: str) -> tuple[str | None, str]:
    """(user info, the rest) of what follows `scheme://`; user info runs to the *last* `@`."""
    if '@' not in rest:
        return None, rest
    userinfo, _, after = rest.rpartition('@')
    return userinfo, after


def redact_url(url: object) -> str:
    """`url` without its secrets, for messages (see the module docstring).

    Example:
        ```python
        from pydantic_ai_context.store._redact import redact_url

        assert redact_url('postgresql://app:pa/ss@db:5432/chat?sslmode=require&password=x') == (
            'postgresql://***@db:5432/chat?sslmode=require&password=***'
        )
        assert redact_url('host=db password=PW dbname=chat') == 'host=db password=*** dbname=chat'
        assert redact_url('postgresql:app:PW') == 'postgresql:*** (unparsable)'
        ```
    """
    if not isinstance(url, str):
        return f'<{type(url).__name__}>'
    scheme = _scheme(url)
    if scheme is not None and url[len(scheme) :].startswith('://'):
        return _redact_uri(scheme, url[len(scheme) + 3 :])
    if '=' in url:
        try:
            pairs = list(conninfo_pairs(url))
        except ValueError:
            return '<unparsable connection string>'
        return ' '.join(
            f'{key}={_shown(key, value)}' if key in _KNOWN_KEYS else _MASK for key, value in pairs
        )
    if scheme is not None:
        return f'{scheme}:{_MASK} (unparsable)' if url[len(scheme) + 1 :] else f'{scheme}:'
    return '<unparsable URL>' if url else "''"


def _shown(key: str, value: str) -> str:
    return value if key in SAFE_KEYS else _MASK


def _redact_uri(scheme: str, rest: str) -> str:
    userinfo, rest = _split_userinfo(rest)
    head = f'{scheme}://' + (f'{_MASK}@' if userinfo is not None else '')
    try:
        parts = urllib.parse.urlsplit(f'//{rest}')
        netloc, path = parts.netloc, urllib.parse.quote(urllib.parse.unquote(parts.path), safe='/~:')
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return f'{head}{_MASK} (unparsable)'
    shown = []
    for key, value in query:
        if key in SAFE_KEYS:
            shown.append(f'{key}={urllib.parse.quote(value, safe="/:._-")}')
        elif key in _KNOWN_KEYS:
            shown.append(f'{key}={_MASK}')
        else:
            shown.append(_MASK)
    text = f'{head}{netloc}{path}'
    if shown or parts.query:
        text += '?' + '&'.join(shown or [_MASK])
    if parts.fragment or rest.endswith('#'):
        text += f'#{_MASK}'
    return text


def secrets_of(url: object) -> set[str]:
    """Every text of `url` that `redact_url` hides (raw and percent-decoded), for `scrub`."""
    if not isinstance(url, str) or not url:
        return set()
    found: set[str] = set()
    scheme = _scheme(url)
    if scheme is not None and url[len(scheme) :].startswith('://'):
        userinfo, rest = _split_userinfo(url[len(scheme) + 3 :])
        if userinfo:
            found.add(userinfo)
            user, _, password = userinfo.partition(':')
            found.add(password)
            if not scheme.lower().startswith('postgres'):  # libpq's user is a role name, shown as such
                found.add(user)
        _, _, tail = rest.partition('?')
        query, _, fragment = tail.partition('#')
        found.add(fragment)
        for item in query.split('&'):
            key, _, value = item.partition('=')
            if key not in SAFE_KEYS:
                found.add(value)
            if key not in _KNOWN_KEYS:
                found.add(key)
    elif '=' in url:
        try:
            found.update(value for key, value in conninfo_pairs(url) if key not in SAFE_KEYS)
        except ValueError:
            found.add(url)
    elif scheme is not None:
        found.add(url[len(scheme) + 1 :])
    else:
        found.add(url)
    decoded = {urllib.parse.unquote(s) for s in found} | {urllib.parse.unquote_plus(s) for s in found}
    return {s for s in found | decoded if len(s) >= 2}


def scrub(text: str, url: object) -> str:
    """`text` (a driver's message) with every secret of `url` replaced by `***`, longest first."""
    for secret in sorted(secrets_of(url), key=len, reverse=True):
        text = text.replace(secret, _MASK)
    return text


def conninfo_pairs(text: str) -> Iterator[tuple[str, str]]:
    """The `key=value` pairs of a libpq keyword/value connection string, as libpq reads them.

    Keys and `=` may be surrounded by spaces; a value is a run of non-space characters, or a
    single-quoted string; a backslash escapes the next character in either. `ValueError` for
    anything libpq would refuse (a key without `=`, an unterminated quote).
    """
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return
        start = i
        while i < n and text[i] != '=' and not text[i].isspace():
            i += 1
        key = text[start:i]
        while i < n and text[i].isspace():
            i += 1
        if not key or i >= n or text[i] != '=':
            raise ValueError('missing "=" after a key')
        i += 1
        while i < n and text[i].isspace():
            i += 1
        value: list[str] = []
        if i < n and text[i] == "'":
            i += 1
            while True:
                if i >= n:
                    raise ValueError('unterminated quoted value')
                if text[i] == '\\' and i + 1 < n:
                    value.append(text[i + 1])
                    i += 2
                elif text[i] == "'":
                    i += 1
                    break
                else:
                    value.append(text[i])
                    i += 1
        else:
            while i < n and not text[i].isspace():
                if text[i] == '\\' and i + 1 < n:
                    value.append(text[i + 1])
                    i += 2
                else:
                    value.append(text[i])
                    i += 1
        yield key, ''.join(value)
