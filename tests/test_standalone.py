"""A policy used on its own as a pydantic-ai history processor (`policy(messages)`) reads its input
as a profile does: normalized (a broken history repaired, each repair logged), and returns a valid
view keeping the invariants of DESIGN section 2."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.messages import UserPromptPart as U

from pydantic_ai_context.integrity import validate_view
from pydantic_ai_context.policies.dedupe import dedupe_reads
from pydantic_ai_context.policies.fit import fit_to_budget
from pydantic_ai_context.policies.isolate import isolate_boundaries
from pydantic_ai_context.policies.mask import mask_observations
from pydantic_ai_context.policies.trim import trim_tool_outputs

from ._examples import examples
from .invariants import assert_all
from .strategies import any_histories

POLICIES: dict[str, Any] = {
    'isolate': lambda: isolate_boundaries(),
    'dedupe': lambda: dedupe_reads(),
    'trim': lambda: trim_tool_outputs(max_tokens=60, keep_tokens=30, keep_recent=1, step=1),
    'mask': lambda: mask_observations(keep_recent=1, step=1),
    'fit': lambda: fit_to_budget(),
}


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=any_histories, name=st.sampled_from(sorted(POLICIES)))
def test_a_policy_on_its_own_returns_a_valid_view_of_any_history(log: list[ModelMessage], name: str) -> None:
    snapshot = copy.deepcopy(log)
    view = POLICIES[name]()(log)
    assert_all(log, snapshot, view)


def test_a_broken_history_is_repaired_and_the_repair_logged(caplog: pytest.LogCaptureFixture) -> None:
    # Two requests in a row (the second an orphan result), then a step whose call has no result.
    log = [
        ModelRequest(parts=[U('task 1')]),
        ModelRequest(parts=[ToolReturnPart('ls', 'a.py', tool_call_id='gone')]),
        ModelResponse(parts=[ToolCallPart('ls', {}, tool_call_id='c1')]),
        ModelRequest(parts=[U('task 2')]),
    ]
    with caplog.at_level(logging.INFO, logger='pydantic_ai_context.integrity'):
        view = mask_observations(keep_recent=1, step=1)(log)
    validate_view(view)
    assert view[0].parts == [log[0].parts[0]]  # the orphan result is gone from the view ...
    assert any('normalize repaired' in r.getMessage() for r in caplog.records)  # ... and said so
    assert len(log[1].parts) == 1  # the log is untouched
