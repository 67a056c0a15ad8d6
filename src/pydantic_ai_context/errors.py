"""Every exception and warning this package raises, in one place."""

from __future__ import annotations

__all__ = (
    'ContextBudgetExceeded',
    'ContextError',
    'ContextSettingsError',
    'ContextWarning',
    'HistoryIntegrityError',
    'StoreEntryMissing',
    'StoreError',
)


class ContextError(Exception):
    """Base class of every error raised by `pydantic_ai_context`: catch it to handle them all.

    Example:
        ```python
        from pydantic_ai_context import ContextError, profile

        try:
            profile('coding', context_window=-5)
        except ContextError as exc:  # here a ContextSettingsError
            print(f'context management refused: {exc}')
        ```
    """


class HistoryIntegrityError(ContextError, ValueError):
    """A message history is malformed in a way that cannot be repaired safely.

    The message names the index of the offending message and what is wrong with it.

    Example:
        ```python
        from pydantic_ai_context import HistoryIntegrityError

        err = HistoryIntegrityError(3, 'expected a ModelRequest or ModelResponse, got str')
        assert err.index == 3
        assert 'message 3' in str(err)
        ```
    """

    def __init__(self, index: int | None, problem: str) -> None:
        self.index = index
        self.problem = problem
        where = f'message {index}: ' if index is not None else ''
        super().__init__(f'{where}{problem}')


class ContextBudgetExceeded(ContextError):
    """The fully compacted view still does not fit the context budget.

    Raised instead of sending a request the provider would have to reject.

    Example:
        ```python
        from pydantic_ai_context import ContextBudgetExceeded

        err = ContextBudgetExceeded(used=140_000, limit=120_000, detail='newest message alone is 130,000 tokens')
        assert err.over_by == 20_000
        ```
    """

    def __init__(self, used: int, limit: int, *, detail: str = '', policy: str | None = None) -> None:
        self.used = used
        self.limit = limit
        self.detail = detail
        self.policy = policy
        message = f'context needs {used:,} tokens but the budget allows {limit:,}'
        if used > limit:  # never a negative overage: a budget that leaves no room says so in `detail`
            message += f' (over by {used - limit:,})'
        if policy:
            message += f' after {policy}'
        if detail:
            message += f': {detail}'
        super().__init__(message)

    @property
    def over_by(self) -> int:
        """How many tokens over the limit the view is."""
        return self.used - self.limit


class ContextSettingsError(ContextError, ValueError):
    """An environment variable holds a value its setting does not accept; the message names the variable.

    Example:
        ```python
        from pydantic_ai_context import ContextSettingsError

        err = ContextSettingsError('PYDANTIC_AI_CONTEXT_CONTEXT_WINDOW: not an integer')
        assert isinstance(err, ValueError)
        ```
    """


class ContextWarning(UserWarning):
    """A degraded but safe mode, e.g. token counting fell back to a heuristic.

    Example:
        ```python
        import warnings

        from pydantic_ai_context import ContextWarning

        warnings.simplefilter('error', ContextWarning)  # in tests: fail instead of degrading
        warnings.simplefilter('ignore', ContextWarning)  # or: accept the fallback silently
        ```
    """


class StoreError(ContextError):
    """A session or conversation store cannot do what was asked, or found its data unreadable.

    Carries the store (file or database), session or conversation id, and row (a session row's
    sequence number, a conversation entry's id, an artifact's key) where they are known, so a repair
    tool can find the offending row.

    Example:
        ```python
        from pydantic_ai_context import StoreError

        err = StoreError("session 'chat-1': message 3 (row seq 3) is corrupt", session_id='chat-1', seq=3)
        assert err.seq == 3 and 'chat-1' in str(err)
        ```
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        session_id: str | None = None,
        seq: int | None = None,
        conversation_id: str | None = None,
        entry_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        """The store file, or the database (its URL without the password)."""
        self.session_id = session_id
        self.seq = seq
        self.conversation_id = conversation_id
        self.entry_id = entry_id


class StoreEntryMissing(StoreError, LookupError):
    """A conversation entry a history needs is not in the store.

    A `LookupError`, as pydantic-ai's `ConversationStore` expects from `read_entry`: while another
    writer deletes or rewrites the conversation, pydantic-ai reads it again; if the conversation did
    not change, the history is broken and this error reaches the caller, naming the entry.

    Example:
        ```python
        from pydantic_ai_context.errors import StoreEntryMissing

        err = StoreEntryMissing("entry 'e2' (parent of 'e3') is missing", entry_id='e2')
        assert isinstance(err, LookupError) and err.entry_id == 'e2'
        ```
    """
