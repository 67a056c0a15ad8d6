"""Prefixes of message lists: the same objects, or equal messages (for folds of the messages' values)."""

from __future__ import annotations

import copy
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart

from pydantic_ai_context import _prefix, _scope
from pydantic_ai_context._prefix import begins_with, equal_prefix, equal_prefix_length, first_difference
from pydantic_ai_context._scope import MemoScope, compiling, resumed_fold


def _log(n: int) -> list[ModelMessage]:
    return [ModelRequest(parts=[UserPromptPart(f'message {i}')]) for i in range(n)]


class _Unequal:
    """A tool result content whose `==` raises, as a numpy array's truth value does."""

    def __eq__(self, other: object) -> bool:
        raise ValueError('the truth value of an array is ambiguous')

    __hash__ = object.__hash__


def test_equal_messages_are_a_prefix_the_same_objects_are_not() -> None:
    log = _log(1_200)
    copies = copy.deepcopy(log)
    assert equal_prefix([*copies, *_log(2)], log)
    assert not begins_with([*copies, *_log(2)], log)
    assert equal_prefix_length(log, copies) == len(log)
    assert first_difference(log, copies) == 0


def test_where_equal_lists_part_is_found_in_every_chunk() -> None:
    log = _log(1_200)
    for at in (0, 1, 511, 512, 513, 1_024, 1_199):
        other = copy.deepcopy(log)
        other[at] = ModelRequest(parts=[UserPromptPart('another text')])
        assert equal_prefix_length(log, other) == at
        assert not equal_prefix(other, log)
    assert equal_prefix_length(log, log[:700]) == 700
    assert equal_prefix(tuple(log), log[:10])  # a tuple and a list of the same messages


def test_an_eq_that_raises_falls_back_to_identity() -> None:
    log = _log(10)
    odd = ModelRequest(parts=[ToolReturnPart('t', _Unequal(), tool_call_id='c')])
    mine = [*log, odd]
    theirs = [*log, ModelRequest(parts=[ToolReturnPart('t', _Unequal(), tool_call_id='c')])]
    assert equal_prefix(mine, [*log, odd])  # the same objects
    assert not equal_prefix(theirs, mine)  # `==` raised: only the same objects count
    assert equal_prefix_length(mine, theirs) == len(log)


def test_a_compile_tries_first_the_fold_the_same_call_used_last_time(monkeypatch: Any) -> None:
    """Folds of one name over several lists of a chain: at the next compile, each call compares
    its list with the fold the same call used before, not with every fold."""
    compared: list[int] = []
    real = _prefix.equal_prefix

    def counting(messages: Any, prefix: Any) -> bool:
        compared.append(len(prefix))
        return real(messages, prefix)

    class Count:
        def __init__(self) -> None:
            self.messages: list[ModelMessage] = []

        def truncate(self, n: int) -> None:
            del self.messages[n:]

        def extend(self, messages: Any) -> None:
            self.messages.extend(messages[len(self.messages) :])

    monkeypatch.setattr(_scope, 'equal_prefix', counting)
    log = _log(400)
    # Four lists a compile folds in turn (a chain's steps), each unlike the others from message 1.
    chains = [[log[0], *_log(k + 50)] for k in range(4)]
    scope = MemoScope()
    with compiling(scope, log):
        for chain in chains:
            resumed_fold('test.order', chain, Count, lambda f: len(f.messages))
    with compiling(scope, log):
        compared.clear()
        for chain in chains:
            assert (
                resumed_fold('test.order', [*chain, *_log(2)], Count, lambda f: len(f.messages))
                == len(chain) + 2
            )
        assert len(compared) == len(chains)  # one comparison each: the fold it used before
