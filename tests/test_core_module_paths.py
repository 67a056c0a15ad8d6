"""The core view machinery split by idea (issue 21): old import paths offer the same objects, no cycle."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

import pytest

from pydantic_ai_context import _encodings, _instructions, _usage, integrity, overhead, request_tokens, tokens
from pydantic_ai_context.integrity import _call_ids, _cuts, _normalize, _pairing, _validity

SRC = Path(importlib.import_module('pydantic_ai_context').__file__ or '').parent

INTEGRITY_HOMES = {
    _pairing: ['Repair', 'RepairKind', 'ToolPair', 'PairingReport', 'analyze_pairs', 'check_messages', '_Checked'],
    _cuts: ['safe_cut_points', '_Cuts'],
    _call_ids: ['unique_call_ids', '_readable_id', '_unique_call_ids'],
    _validity: ['validate_view', '_already_valid', '_Validity', '_shape'],
    _normalize: ['normalize', 'normalize_with_repairs', 'patch_dangling_tool_calls', 'INTERRUPTED_NOTE', 'logger'],
}  # fmt: skip

TOKENS_HOMES = {
    _encodings: [
        'encoding_for_model', 'encoding_is_models_own', 'LOAD_TIMEOUT_SECONDS', '_model_name', '_try_load',
        '_load_with_timeout', '_resolve_encoding', '_known_encodings', '_cached_locally', '_tiktoken_cache_dir',
        '_try_quicktok', '_QuicktokEncoding', '_QUICKTOK_ENCODINGS', '_warn_fallback', '_DOWNLOADED_FILES',
        '_LOAD_LOCK',
    ],
    _usage: ['ContextUsage', '_context_input_tokens', '_same_messages', '_index_in'],
}  # fmt: skip


@pytest.mark.parametrize('home', list(INTEGRITY_HOMES), ids=lambda m: m.__name__)
def test_integrity_offers_every_name_it_did_as_the_same_object(home: ModuleType) -> None:
    for name in INTEGRITY_HOMES[home]:
        assert getattr(integrity, name) is getattr(home, name), name


def test_integrity_public_names_are_unchanged() -> None:
    assert set(integrity.__all__) == {
        'PairingReport', 'Repair', 'RepairKind', 'ToolPair', 'analyze_pairs', 'check_messages', 'normalize',
        'normalize_with_repairs', 'patch_dangling_tool_calls', 'safe_cut_points', 'unique_call_ids', 'validate_view',
    }  # fmt: skip
    # The repair log keeps its documented logger name wherever the normaliser lives.
    assert integrity.logger.name == 'pydantic_ai_context.integrity'


@pytest.mark.parametrize('home', list(TOKENS_HOMES), ids=lambda m: m.__name__)
def test_tokens_offers_every_name_it_did_as_the_same_object(home: ModuleType) -> None:
    for name in TOKENS_HOMES[home]:
        assert getattr(tokens, name) is getattr(home, name), name


def test_tokens_public_names_are_unchanged() -> None:
    assert set(tokens.__all__) == {
        'BINARY_ITEM_TOKENS', 'MESSAGE_OVERHEAD_TOKENS', 'PART_OVERHEAD_TOKENS', 'CacheInfo', 'ContextUsage',
        'HeuristicCounter', 'TiktokenCounter', 'TokenCounter', 'default_counter', 'encoding_for_model',
        'estimate_tokens', 'measure_context', 'message_tokens',
    }  # fmt: skip
    for name in tokens.__all__:
        assert hasattr(tokens, name), name


def test_newest_instructions_is_one_function_for_request_tokens_and_overhead() -> None:
    assert request_tokens.newest_instructions is _instructions.newest_instructions
    assert overhead.newest_instructions is _instructions.newest_instructions
    assert 'newest_instructions' in request_tokens.__all__


def _imported(path: Path) -> set[str]:
    """Every module of the package `path` imports, at any depth (in functions, under TYPE_CHECKING)."""
    package = ['pydantic_ai_context', *path.parent.relative_to(SRC).parts]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            target = '.'.join([*base, node.module] if node.module else base)
            found.add(target)
            found.update(f'{target}.{a.name}' for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize(
    ('module', 'above'),
    [
        ('_encodings.py', 'pydantic_ai_context.tokens'),
        ('_usage.py', 'pydantic_ai_context.tokens'),
        ('_instructions.py', 'pydantic_ai_context.request_tokens'),
        ('_instructions.py', 'pydantic_ai_context.overhead'),
        ('overhead.py', 'pydantic_ai_context.request_tokens'),
        *[
            (f'integrity/{m}.py', 'pydantic_ai_context.integrity._normalize')
            for m in ('_pairing', '_cuts', '_validity')
        ],
        *[
            (f'integrity/{m}.py', 'pydantic_ai_context.integrity._validity')
            for m in ('_pairing', '_cuts', '_call_ids')
        ],
        ('integrity/_pairing.py', 'pydantic_ai_context.integrity._call_ids'),
    ],
)
def test_a_lower_module_never_imports_the_one_that_re_exports_it(module: str, above: str) -> None:
    assert above not in _imported(SRC / module)
