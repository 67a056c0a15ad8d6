"""`check_budget`: the window check of a chain that does not compact (`transparent`).

Every compacting preset ends with `fit_to_budget`, which raises `ContextBudgetExceeded` when even
its smallest view does not fit. A chain that only repairs needs the same guarantee without the
dropping: never send a request the provider must reject (DESIGN.md section 3).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage

from pydantic_ai_context.errors import ContextBudgetExceeded
from pydantic_ai_context.views import CompileContext

from ._base import SyncPolicy

__all__ = ('CheckBudget', 'check_budget')


@dataclass(kw_only=True)
class CheckBudget(SyncPolicy):
    """Raise `ContextBudgetExceeded` when the view is over the budget's limit; change nothing.

    Only a known window is enforced: one given explicitly, or the model's (its profile or
    genai-prices). The conservative fallback window used for a model nothing knows (32k) is not,
    since the model may well accept more; `fit_to_budget` is the policy that shrinks a view to
    whatever window it has. With no budget in the context nothing is checked.

    Raises:
        ContextBudgetExceeded: the view's tokens are over `context.budget.limit`.

    Example:
        ```python
        from pydantic_ai.messages import ModelRequest, UserPromptPart

        from pydantic_ai_context import ContextBudget, ContextBudgetExceeded, HeuristicCounter
        from pydantic_ai_context.policies.check import check_budget
        from pydantic_ai_context.views import CompileContext

        log = [ModelRequest(parts=[UserPromptPart('word ' * 5_000)])]
        context = CompileContext(counter=HeuristicCounter(), budget=ContextBudget(context_window=4_000, reserved_output=500))
        try:
            check_budget().apply(log, context)
        except ContextBudgetExceeded as exc:
            assert exc.used > exc.limit
        else:
            raise AssertionError('a view over the window must raise')
        ```
    """

    name: str = 'check_budget'
    """The step's name in a profile's chain."""

    def apply(self, messages: list[ModelMessage], context: CompileContext) -> list[ModelMessage]:
        budget = context.budget
        if budget is None or budget.window_source == 'default':
            return list(messages)
        used = context.counter.count_messages(messages)
        if used > budget.limit:
            raise ContextBudgetExceeded(
                used,
                budget.limit,
                policy=self.name,
                detail=f'this profile does not compact (the {budget.window_source} window is '
                f'{budget.context_window:,} tokens); use a compacting preset such as coding',
            )
        return list(messages)


def check_budget() -> CheckBudget:
    """A `CheckBudget` step: raise when the view is over a known window, change nothing otherwise."""
    return CheckBudget()
