"""Fact extraction as it was before issue 13, frozen: the reference the linear rewrite is held to.

These patterns search the whole text and are quadratic on long separator-free runs (which is why
they were replaced); on ordinary tool output they define which facts a result holds. Use them only
on small or ordinary text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

PATH_RE = re.compile(r'/?(?:[\w.-]+/)+[\w.-]+\.[A-Za-z]\w{0,5}')
"""`_facts.PATH_RE` before issue 13, searched through the text."""
REPLAY_PATH_RE = re.compile(r'(?:[\w.-]+/)+[\w.-]+\.[A-Za-z]\w{0,5}')
"""`replay.PATH_PATTERN`, searched through the text."""
PATH_RUN_RE = re.compile(r'(?<![\w./-])[\w.-]*+/[\w./-]*+')
"""`_facts.path_runs` as the search it replaced: each maximal run of path characters with a slash."""
ERROR_LINE_RE = re.compile(r'Error|Exception|FAILED|Traceback|error:|FAIL:')
EXIT_CODE_RES = (
    re.compile(r'<returncode>\s*(-?\d+)\s*</returncode>'),
    re.compile(r'\[Command finished with exit code (-?\d+)\]'),
    re.compile(r'completed with exit code (-?\d+)'),
    re.compile(r'\bexit(?:ed)?[ _]?(?:code|status)\s*[:=]?\s*(-?\d+)', re.IGNORECASE),
    re.compile(r'\breturn ?code\s*[:=]\s*(-?\d+)', re.IGNORECASE),
)
EXIT_KEYS = ('exit_code', 'returncode', 'return_code', 'exit_status', 'exitcode', 'status_code')


@dataclass(frozen=True)
class ReferenceFacts:
    paths: tuple[str, ...]
    error_lines: tuple[str, ...]


def reference_facts(text: str) -> ReferenceFacts:
    """The paths and error lines the extraction before issue 13 found in `text`."""
    paths = tuple(dict.fromkeys(m.group(0) for m in PATH_RE.finditer(text)))
    errors: dict[str, None] = {}
    for line in text.splitlines():
        if ERROR_LINE_RE.search(line):
            clipped = line.strip()[:120]
            if len(clipped) > 8:
                errors[clipped] = None
    return ReferenceFacts(paths=paths, error_lines=tuple(errors))


def reference_exit_code(text: str) -> int | None:
    """The exit code the extraction before issue 13 read from `text`."""
    if text.lstrip().startswith('{'):
        try:
            loaded = json.loads(text)
        except ValueError:
            loaded = None
        if isinstance(loaded, Mapping):
            found = _exit_code_in_mapping(loaded)
            if found is not None:
                return found
    for pattern in EXIT_CODE_RES:
        matches = pattern.findall(text)
        if matches:
            return int(matches[-1])
    return None


def _exit_code_in_mapping(value: Mapping[object, object], depth: int = 2) -> int | None:
    for key in EXIT_KEYS:
        code = value.get(key)
        if isinstance(code, int) and not isinstance(code, bool):
            return code
        if isinstance(code, str) and code.lstrip('-').isdigit():
            return int(code)
    if depth > 1:
        for nested in value.values():
            if isinstance(nested, Mapping):
                found = _exit_code_in_mapping(nested, depth - 1)
                if found is not None:
                    return found
    return None
