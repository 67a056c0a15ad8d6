"""Smoke test of an installed wheel, run by .ci/run in a clean venv (runtime dependencies only).

What a user gets from `pip install`: the package imports, counts tokens exactly without a network
(tiktoken's encoding ships with the install), a profile runs in an agent, and the command line works.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pydantic_ai_context
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models.test import TestModel

from pydantic_ai_context import TiktokenCounter, profile

assert 'site-packages' in pydantic_ai_context.__file__, f'not the installed wheel: {pydantic_ai_context.__file__}'

with warnings.catch_warnings():
    warnings.simplefilter('error')  # a fallback to the heuristic warns: that is a failure here
    counter = TiktokenCounter()
    assert counter.count_text('hello world') == 2, counter.name
assert counter.name.startswith('tiktoken:'), f'approximate counting in a plain install: {counter.name}'

ctx_profile = profile('coding', context_window=32_000)
agent = Agent(TestModel(), capabilities=[ctx_profile])
result = agent.run_sync('Summarise the repository layout.')
assert result.all_messages()
assert ctx_profile.last_usage is not None

with tempfile.TemporaryDirectory() as tmp:
    run = Path(tmp) / 'run.json'
    run.write_bytes(ModelMessagesTypeAdapter.dump_json(result.all_messages()))
    cli = Path(sys.executable).parent / 'pydantic-ai-context'
    version = subprocess.run([cli, '--version'], capture_output=True, text=True, check=True).stdout
    assert pydantic_ai_context.__version__ in version
    out = Path(tmp) / 'out.json'
    subprocess.run([cli, 'replay', run, '-p', 'coding', '--json', out], capture_output=True, check=True)
    assert json.loads(out.read_text())['ok'] is True

print(f'wheel smoke test ok: pydantic-ai-context {pydantic_ai_context.__version__}, {counter.name}')
