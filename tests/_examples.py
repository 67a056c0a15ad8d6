"""How many examples a hypothesis property draws: its own number, scaled by `PAC_EXAMPLES_SCALE`.

CI runs the whole suite at full strength on the newest pydantic-ai (`make test`), then again on the
lowest supported 2.x and the last 1.x to run every hook path. Those two legs set the scale below 1:
the properties are about shapes of history, which the pydantic-ai version does not change, and the
full count there would double CI's time for no new shape. A seed sweep sets it above 1.
"""

from __future__ import annotations

import math
import os

SCALE = float(os.environ.get('PAC_EXAMPLES_SCALE', '1'))


def examples(n: int) -> int:
    """`n` examples at scale 1; never fewer than 3."""
    return max(3, math.ceil(n * SCALE))


def every(n: int) -> int:
    """A check made on every `n`-th item at scale 1 (a fresh compile beside an incremental one) is
    made on every `n / scale`-th below it: a quarter of the checks in the version legs."""
    return max(1, math.ceil(n / min(SCALE, 1.0))) if SCALE > 0 else n
