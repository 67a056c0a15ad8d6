"""examples/chat.py runs non-interactively: commands, /compact, Ctrl-C during a tool call, and sessions."""

from __future__ import annotations

import os
import queue
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

EXAMPLE = Path(__file__).resolve().parents[1] / 'examples' / 'chat.py'


def wait_for_line(stream: IO[str], prefix: str, *, timeout: float) -> bool:
    """Read `stream` until a line starts with `prefix`; False if none came within `timeout` seconds
    (a guard against a hang, not a timing assumption: the line normally comes in well under a second)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
            if line.startswith(prefix):
                return
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            return False
        if line is None:
            return False
        if line.startswith(prefix):
            return True


def chat(stdin: str, *args: str) -> str:
    env = {**os.environ, 'CHAT_DEPLOY_SECONDS': '0'}
    env.pop('PYDANTIC_AI_CONTEXT_MODEL', None)
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_commands_from_piped_stdin() -> None:
    out = chat('hello\nshow me the log\n/history\n/compact the logs\n/history\n/clear\n/history\n')
    assert 'assistant: You said: hello' in out
    assert '4 messages' not in out
    assert '6 messages, 2 user turns, 1 tool call,' in out
    assert 'read_log:' in out
    # The agent's two tools are part of every request: /history counts their definitions.
    tools_line = next(line for line in out.splitlines() if line.strip().startswith('messages 6,'))
    assert 'tools 0 tokens' not in tools_line
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
        # A shell's background job (CI started with `&`, `nohup`) ignores SIGINT, and a child
        # inherits that: Python then installs no KeyboardInterrupt handler and Ctrl-C does nothing.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        proc.stdin.write('please deploy\n')
        proc.stdin.flush()
        # The readiness signal: the example prints this line from the event loop once the tool is
        # parked in its wait, so the SIGINT lands in the wait however slow the machine is.
        ready = wait_for_line(proc.stdout, 'deploying', timeout=60)
        assert ready, 'the tool never reported that it was waiting'
        proc.send_signal(signal.SIGINT)
        proc.stdin.write('/history\nhello\n/quit\n')
        proc.stdin.close()
        out = proc.stdout.read()
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ''
    finally:
        if proc.poll() is None:
            proc.kill()
    assert 'interrupted; unanswered tool calls were closed' in out
    assert '1 tool call,' in out  # the interrupted call is in the history, with a synthetic result
    assert 'assistant: You said: hello' in out  # and the chat goes on


def test_sessions_survive_a_restart_and_resume_by_id(tmp_path: Path) -> None:
    db = str(tmp_path / 'chat.db')
    first = chat('hello\nshow me the log\n/history\n', '--session', 'work', '--db', db)
    assert 'session work (0 messages)' in first
    assert '6 messages, 2 user turns, 1 tool call,' in first
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600

    # A new process resumes the log; the conversation goes on from it.
    second = chat('/history\nhello again\n/history\n', '--session', 'work', '--db', db)
    assert 'session work (6 messages)' in second
    # Right after the resume, before any request of this process, the tools are counted too.
    resumed_stats = second[second.index('6 messages, 2 user turns') :]
    assert 'tools 0 tokens' not in resumed_stats.splitlines()[1], resumed_stats
    assert '8 messages, 3 user turns, 1 tool call,' in second

    third = chat(
        'side question\n/sessions\n/resume work\n/history\n/resume\n', '--session', 'other', '--db', db
    )
    listing = third[third.index('* other') :]
    assert '* other: 2 messages' in listing
    assert '  work: 8 messages' in listing
    assert 'resumed work (8 messages)' in third
    assert '8 messages, 3 user turns' in third
    assert 'usage: /resume ID' in third


def test_without_a_session_nothing_is_written(tmp_path: Path) -> None:
    env = {**os.environ, 'CHAT_DEPLOY_SECONDS': '0'}
    env.pop('PYDANTIC_AI_CONTEXT_MODEL', None)
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        input='hello\n/sessions\n',
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert ': 2 messages' in done.stdout  # the in-memory session
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_command_lists_the_commands_instead_of_reaching_the_model() -> None:
    out = chat('/histroy\n/history\n')
    assert 'unknown command /histroy; commands: /compact [focus], /clear, /history' in out
    assert 'assistant:' not in out
    assert '0 messages, 0 user turns, 0 tool calls' in out  # nothing was sent or stored


def test_a_message_may_start_with_a_slash_when_doubled() -> None:
    out = chat('//etc is a folder\n')
    assert 'assistant: You said: /etc is a folder' in out


def test_counts_read_like_english() -> None:
    out = chat('hello\n/history\n')
    assert '2 messages, 1 user turn, 0 tool calls' in out


def test_resuming_an_unknown_session_says_so_and_asks_before_creating_it(tmp_path: Path) -> None:
    db = str(tmp_path / 'chat.db')
    chat('hello\n', '--session', 'work', '--db', db)
    declined = chat('/resume nosuchid\nno\n/history\n', '--session', 'work', '--db', db)
    assert "no stored session 'nosuchid' (stored: work). Create it? [y/N]" in declined
    assert 'staying in session work' in declined
    assert '2 messages, 1 user turn' in declined  # still the work session

    accepted = chat('/resume nosuchid\ny\nfirst words\n/sessions\n', '--session', 'work', '--db', db)
    assert 'new session nosuchid' in accepted
    listing = accepted[accepted.index('* nosuchid') :]
    assert '* nosuchid: 2 messages' in listing
    assert 'resumed' not in accepted
