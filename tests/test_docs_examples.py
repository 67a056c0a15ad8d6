"""Every Python code block in README.md, docs/ and the package's docstrings runs, as a reader pastes it.

Markdown blocks are found and run by pytest-examples (what pydantic and pydantic-ai use); docstring
blocks are read from the docstrings themselves (`ast`), so escapes mean what they mean in Python.
Each block runs on its own, as a fresh `__main__` module, offline.

The rules for a block (this test enforces them; follow them when adding a page):

- **Self-contained.** Its own imports and data; nothing carries over from the block above.
- **Offline.** Agents run on `TestModel` / `FunctionModel`. A provider model string such as
  `Agent('openai:gpt-4o', ...)` is allowed where the page (or docstring) names the extra it needs,
  e.g. `pip install "pydantic-ai-slim[openai]"`; this harness then substitutes a `TestModel` for it
  (pydantic-ai's `infer_model` is patched). Nobody edits the block for the test.
- **Optional packages** (`import logfire`) only where the page says how to install them
  (`pip install logfire`). Not installed here: the block is compiled, then skipped with that reason.
- **A block that must not run** is fenced ```` ```python {test="skip"} ```` (mkdocs renders it as
  usual); say in the text around it why. Prefer a runnable block: today none is skipped.
- **A block that needs a newer pydantic-ai** (a hook or class older versions lack) is fenced
  ```` ```python {requires="2.66"} ````: on an older pydantic-ai it is compiled, then skipped with
  that reason (CI runs the suite on 2.62 and 1.107 too). Say so in the text around it.
- **No `>>>` sessions**: write a normal block that prints or asserts.
- Only `python`/`py` fences run; `bash`, `console`, `text` and `json` blocks are not code to run.
"""

from __future__ import annotations

import ast
import gc
import importlib.util
import os
import re
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic_ai
import pydantic_ai.models
import pytest
from pydantic_ai.models.test import TestModel
from pytest_examples import CodeExample, EvalExample, find_examples

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / 'src' / 'pydantic_ai_context'

PROVIDERS = ('openai', 'anthropic', 'google-gla', 'google-vertex', 'groq', 'mistral', 'cohere', 'bedrock')
AGENT_MODEL = re.compile(r"""Agent\(\s*['"]([\w-]+):""")
"""An agent built on a model name: `Agent('openai:gpt-4o', ...)`."""
IMPORTED = re.compile(r'^\s*(?:import|from)\s+([A-Za-z_]\w*)', re.M)
EXTRAS = {'google-gla': 'google', 'google-vertex': 'google'}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r'\d+', text)[:3])


PYDANTIC_AI_VERSION = _version(pydantic_ai.__version__)


def markdown_examples() -> list[CodeExample]:
    return list(find_examples(ROOT / 'README.md', ROOT / 'docs'))


def docstring_examples() -> Iterator[CodeExample]:
    for path in sorted(PACKAGE.rglob('*.py')):
        tree = ast.parse(path.read_text(encoding='utf-8'))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            doc = ast.get_docstring(node, clean=True)
            if not doc:
                continue
            line = getattr(node, 'lineno', 1)
            for match in re.finditer(r'^( *)```(\w*)([^\n]*)\n(.*?)^\1```', doc, flags=re.M | re.S):
                indent, lang, rest, body = match.groups()
                if lang.lower() not in {'python', 'py'}:
                    continue
                source = '\n'.join(row[len(indent) :] for row in body.splitlines()) + '\n'
                start = line + doc[: match.start()].count('\n') + 1
                yield CodeExample.create(source, path=path, start_line=start, prefix=f'{lang}{rest}'.lower())


EXAMPLES = [*markdown_examples(), *docstring_examples()]


def example_id(example: CodeExample) -> str:
    return f'{example.path.relative_to(ROOT)}:{example.start_line}'


def page_text(example: CodeExample) -> str:
    """The text a reader sees around the block: the markdown page, or the whole module."""
    return example.path.read_text(encoding='utf-8')


@pytest.fixture
def substitute_models(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Provider model strings resolve to a `TestModel`; the names asked for are recorded."""
    asked: list[str] = []
    real = pydantic_ai.models.infer_model

    def infer_model(model: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(model, str) and model.partition(':')[0] in PROVIDERS:
            asked.append(model)
            return TestModel()
        return real(model, *args, **kwargs)

    monkeypatch.setattr(pydantic_ai.models, 'infer_model', infer_model)
    for name in list(os.environ):
        if name.upper().startswith('PYDANTIC_AI_CONTEXT_'):
            monkeypatch.delenv(name)
    return asked


@pytest.fixture(autouse=True)
def restore_collector() -> Iterator[None]:
    """A block may hold or freeze the garbage collector (architecture.md shows an application
    doing so): later tests get it as it was."""
    enabled, frozen = gc.isenabled(), gc.get_freeze_count()
    yield
    if gc.get_freeze_count() != frozen and frozen == 0:
        gc.unfreeze()
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.fixture(autouse=True)
def restore_presets() -> Iterator[None]:
    """A block may register a preset (`register_profile`): later tests see only the ones before it."""
    from pydantic_ai_context import _registry

    before = dict(_registry.PRESETS)
    yield
    _registry.PRESETS.clear()
    _registry.PRESETS.update(before)


def test_the_docs_have_examples() -> None:
    pages = {e.path.name for e in EXAMPLES if e.path.suffix == '.md'}
    assert {'README.md', 'getting-started.md', 'observability.md'} <= pages
    assert sum(e.in_py_file() for e in EXAMPLES) >= 20, 'docstring examples are collected too'


@pytest.mark.parametrize('example', EXAMPLES, ids=example_id)
def test_example_runs(example: CodeExample, eval_example: EvalExample, substitute_models: list[str]) -> None:
    source = example.source
    text = page_text(example)
    assert not re.search(r'^\s*>>> ', source, flags=re.M), 'write a normal block, not a >>> session'
    check_extras({m.group(1) for m in AGENT_MODEL.finditer(source)}, text)
    settings = example.prefix_settings()
    required = settings.get('requires')
    if required is not None and _version(required) > PYDANTIC_AI_VERSION:
        compile(source, example_id(example), 'exec')
        pytest.skip(
            f'{example_id(example)} needs pydantic-ai {required} (installed: {pydantic_ai.__version__})'
        )
    if settings.get('test') == 'skip':
        compile(source, example_id(example), 'exec')
        pytest.skip(f'{example_id(example)} is marked test="skip"')
    for module in sorted(set(IMPORTED.findall(source))):
        if module in sys.stdlib_module_names or importlib.util.find_spec(module) is not None:
            continue
        assert f'pip install {module}' in text or f'pip install "{module}' in text, (
            f'the block imports {module!r}, which is optional: the page must say how to install it'
        )
        compile(source, example_id(example), 'exec')
        pytest.skip(f'{module} is not installed here (the page says: pip install {module})')
    try:
        eval_example.run(example)
    except Exception as exc:
        # Report the block's own line: pytest's traceback formatting trips over the line numbers
        # pytest-examples gives the example module (they point into the page, not the temp file).
        lines = [
            f.lineno
            for f, _ in traceback.walk_tb(exc.__traceback__)
            if f.f_code.co_filename.endswith('.py') and example.module_name in f.f_code.co_filename
        ]
        where = f'{example.path.relative_to(ROOT)}:{lines[-1]}' if lines else example_id(example)
        raise AssertionError(f'{where}: {type(exc).__name__}: {exc}') from None
    # A model name is fine as a name (a window lookup); a model the block runs needs its extra.
    check_extras({name.partition(':')[0] for name in substitute_models}, text)


def check_extras(providers: set[str], text: str) -> None:
    for provider in sorted(providers):
        extra = EXTRAS.get(provider, provider)
        assert f'pydantic-ai-slim[{extra}]' in text, (
            f'the block runs a {provider!r} model: the page must say to install "pydantic-ai-slim[{extra}]"'
        )


def test_every_public_class_has_a_docstring_with_an_example() -> None:
    # STYLE: each public name has a docstring with an example; the blocks themselves run above.
    import inspect as inspect_module

    import pydantic_ai_context

    missing = [
        name
        for name in pydantic_ai_context.__all__
        if inspect_module.isclass(obj := getattr(pydantic_ai_context, name))
        and '```python' not in (inspect_module.getdoc(obj) or '')
    ]
    assert not missing, f'public classes without a docstring example: {missing}'
