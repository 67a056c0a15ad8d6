"""A compile never holds its event loop for long: large new content is measured in a worker thread."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, UserPromptPart

from pydantic_ai_context import HeuristicCounter, _offload, profile
from pydantic_ai_context._offload import new_messages, warm_off_loop
from pydantic_ai_context.integrity import validate_view

from .builders import History, Tool, long_text


class ThreadNoting(HeuristicCounter):
    """Notes the thread that counts each large text."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[threading.Thread] = []

    def count_text(self, text: str) -> int:
        if len(text) >= 100_000:
            self.threads.append(threading.current_thread())
        return super().count_text(text)


def log_with_a_large_newest_result(steps: int = 12) -> list[ModelMessage]:
    h = History().user('Find why the import fails.', system='You are a coding agent.')
    for i in range(steps):
        h.step(Tool('execute_bash', {'command': f'run {i}'}, long_text(30, prefix=f'run {i}')))
    h.step(Tool('execute_bash', {'command': 'cat build.log'}, long_text(6_000, prefix='build.log')))
    return h.build()


async def test_large_new_content_is_counted_in_a_worker_thread_and_the_view_is_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = log_with_a_large_newest_result()
    counter = ThreadNoting()
    off = await profile('coding', context_window=16_000, counter=counter).compile(log)
    assert counter.threads  # the large result was counted ...
    assert all(t is not threading.main_thread() for t in counter.threads)  # ... off the loop's thread
    monkeypatch.setattr(_offload, 'OFFLOAD_CHARS', 10**12)  # everything on the loop, as before
    on_loop = ThreadNoting()
    on = await profile('coding', context_window=16_000, counter=on_loop).compile(log)
    assert on_loop.threads
    assert all(t is threading.main_thread() for t in on_loop.threads)
    assert on == off


async def test_small_new_content_stays_on_the_loop() -> None:
    log = log_with_a_large_newest_result()
    counter = HeuristicCounter()
    counter.count_messages(log[:-1])
    assert new_messages(counter, log) == log[-1:]  # only the tail the counter has not seen
    assert await warm_off_loop(counter, log, threshold=10**9) is False
    assert await warm_off_loop(counter, log) is True
    assert new_messages(counter, log) == []  # counted: the steps find it measured
    assert await warm_off_loop(counter, log) is False


def overhead_bench() -> Any:
    path = Path(__file__).resolve().parents[1] / 'bench' / 'overhead.py'
    spec = importlib.util.spec_from_file_location('overhead_bench', path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault('overhead_bench', module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize('shape', ['tool-loop', 'chat-tools', 'long-notes', 'observations', 'interleaved'])
def test_every_shape_the_overhead_benchmark_times_is_a_valid_history_of_its_size(shape: str) -> None:
    bench = overhead_bench()
    logs = bench.shape_logs(shape, 200)
    logs = logs if shape == 'interleaved' else [logs]
    assert abs(sum(len(log) for log in logs) - 200) <= 4
    for log in logs:
        validate_view(log)  # raises on an invalid history
    if shape == 'chat-tools':  # a user turn every 8 rounds: many finished runs
        prompts = [m for m in logs[0] if any(isinstance(p, UserPromptPart) for p in m.parts)]
        assert len(prompts) >= 200 // 18
    if shape == 'interleaved':  # four conversations, told apart by their opening
        assert len({str(log[0]) for log in logs}) == 4
