"""examples/chat.py runs non-interactively: commands, /compact, and Ctrl-C during a tool call."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / 'examples' / 'chat.py'


def chat(stdin: str) -> str:
    env = {**os.environ, 'CHAT_DEPLOY_SECONDS': '0'}
    env.pop('PYDANTIC_AI_CONTEXT_MODEL', None)
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], input=stdin, capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_commands_from_piped_stdin() -> None:
    out = chat('hello\nshow me the log\n/history\n/compact the logs\n/history\n/clear\n/history\n')
    assert 'assistant: You said: hello' in out
    assert '4 messages' not in out
    assert '6 messages, 2 user turns, 1 tool calls' in out
    assert 'read_log:' in out
    assert 'compacted:' in out
    assert '2 messages, 0 user turns' in out
    assert 'history cleared' in out
    assert '0 messages' in out
    assert out.rstrip().endswith('bye')


def test_compact_on_an_empty_history_says_why() -> None:
    assert 'not compacted: the history is empty' in chat('/compact\n')


def test_ctrl_c_during_a_tool_call_patches_the_history() -> None:
    env = {**os.environ, 'CHAT_DEPLOY_SECONDS': '30'}
    env.pop('PYDANTIC_AI_CONTEXT_MODEL', None)
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        proc.stdin.write('please deploy\n')
        proc.stdin.flush()
        for line in proc.stdout:
            if line.startswith('deploying'):
                break
        proc.send_signal(signal.SIGINT)
        proc.stdin.write('/history\nhello\n/quit\n')
        proc.stdin.close()
        out = proc.stdout.read()
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ''
    finally:
        if proc.poll() is None:
            proc.kill()
    assert 'interrupted; unanswered tool calls were closed' in out
    assert '1 tool calls' in out  # the interrupted call is in the history, with a synthetic result
    assert 'assistant: You said: hello' in out  # and the chat goes on
