"""What a `summarize_window` keeps between compiles, one set per conversation.

A profile that serves several conversations compiles them in turn. The policy's reading of its
input, the block it built last and the tokens it keeps beside a summary are each resumed from the
previous compile of the *same* conversation: kept in the compile scope's generation (a lineage of
the scope per conversation, the last four), like every policy's previous call (`SyncPolicy._last`),
they follow the conversation being compiled, and a conversation the scope lets go takes them with
it. Outside a compile (a policy used on its own without a scope) the policy keeps one set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic_ai_context._scope import owner_cache
from pydantic_ai_context.policies.summarize._summary_block import BlockMemo, KeptTokens
from pydantic_ai_context.policies.summarize._summary_reading import SummaryLedger

__all__ = ('ConversationState',)


@dataclass
class _State:
    ledger: SummaryLedger = field(default_factory=SummaryLedger)
    block: BlockMemo = field(default_factory=BlockMemo)
    kept: KeptTokens = field(default_factory=KeptTokens)


class ConversationState:
    """Mixin: `_ledger`, `_block` and `_kept` of the conversation the running compile is of.

    Example:
        ```python
        from pydantic_ai_context._scope import MemoScope, compiling
        from pydantic_ai_context.policies.summarize import SummarizeWindow

        policy = SummarizeWindow()
        one, other = MemoScope(), MemoScope()
        with compiling(one, []):
            first = policy._ledger
        with compiling(other, []):
            assert policy._ledger is not first  # another scope, another conversation
        ```
    """

    def _state(self) -> _State:
        states = owner_cache(self, 'summarize state')
        if states is None:
            found: _State | None = self.__dict__.get('_standalone_state')
            if found is None:
                found = self.__dict__.setdefault('_standalone_state', _State())
            return found
        state: _State | None = states.get(None)
        if state is None:
            state = states[None] = _State()
        return state

    @property
    def _ledger(self) -> SummaryLedger:
        return self._state().ledger

    @property
    def _block(self) -> BlockMemo:
        return self._state().block

    @property
    def _kept(self) -> KeptTokens:
        return self._state().kept
