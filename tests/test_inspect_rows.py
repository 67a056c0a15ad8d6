"""What `inspect`'s rows say became of each log message."""

from __future__ import annotations

import pytest

from pydantic_ai_context.cli import main

from . import data


def test_inspect_says_a_request_holding_a_drop_note_was_kept(capsys: pytest.CaptureFixture[str]) -> None:
    # fit_to_budget merges its note into the request before the gap; that request was kept, and
    # its row used to read "changed: dropped".
    path = data.TRAJECTORY_DIR / 'mini_gemini3pro_django_15629.json'
    assert main(['inspect', str(path), '--window', '16000', '-p', 'coding', '--format', 'plain']) == 0
    printed = capsys.readouterr().out
    assert 'drop note added' in printed
    assert 'changed: dropped' not in printed
