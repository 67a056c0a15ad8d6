"""examples/demo.py runs offline and shows the view staying below the log; bad options are usage errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / 'examples' / 'demo.py'
SRC = str(Path(__file__).resolve().parents[1] / 'src')


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, 'PYTHONPATH': SRC + os.pathsep + os.environ.get('PYTHONPATH', ''), 'COLUMNS': '120'}
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_the_demo_compacts_and_keeps_the_log_whole() -> None:
    proc = run_demo('--steps', '14')
    assert proc.returncode == 0, proc.stderr
    assert 'log kept whole: 30 messages' in proc.stdout
    assert 'mask_observations' in proc.stdout
    assert 'answer: Fixed the rounding' in proc.stdout
    # A step that changed content but not the count says so, with the tokens (not '30 -> 30 messages').
    events = proc.stdout[proc.stdout.index('last compaction events:') :]
    flat = ' '.join(events.split())
    assert re.search(
        r'mask_observations: .*\(\d+ messages \(content changed\), [\d,]+ -> [\d,]+ tokens\)', flat
    )
    assert not re.search(r'\((\d+) -> \1 messages', flat)


@pytest.mark.parametrize(('option', 'value'), [('--steps', '-3'), ('--steps', '0'), ('--window', '0')])
def test_a_non_positive_number_is_a_usage_error(option: str, value: str) -> None:
    # `--steps -3` used to run an agent that took no step and print a table of one request.
    proc = run_demo(option, value)
    assert proc.returncode == 2
    assert f'argument {option}: must be a positive integer' in proc.stderr
