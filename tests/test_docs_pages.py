"""What every documentation page must (not) say, beyond its code blocks running (test_docs_examples.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ISSUE = re.compile(r'\bissues?\s+#?\d+', re.IGNORECASE)
"""A reference to an issue by number: `issue 14`, `issues 20 and 22`, `Issue #31`."""


def pages() -> list[Path]:
    return [ROOT / 'README.md', *sorted((ROOT / 'docs').rglob('*.md'))]


def test_no_page_names_an_issue_number() -> None:
    """A user reading the docs has no access to the project's issues: a page says what changed or
    why, never which issue it was."""
    found = [
        f'{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group()!r}'
        for path in pages()
        for text in [path.read_text(encoding='utf-8')]
        for match in ISSUE.finditer(text)
    ]
    assert not found, 'pages name issue numbers:\n' + '\n'.join(found)


def test_the_issue_pattern_finds_the_usual_forms() -> None:
    for text in ('Before and after issue 14', 'issues 20 and 22', 'see Issue #31', 'issue\n22'):
        assert ISSUE.search(text), text
    for text in ('an issue or a pull request', 'issue a warning', 'color: #444444', '&#39;', 'step 2 of 3'):
        assert not ISSUE.search(text), text
