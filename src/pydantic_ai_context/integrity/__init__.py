"""Tool-call pairing, safe cut points, and the normalizer that keeps every view valid.

A view is valid (DESIGN.md invariants 2 and 7) when it starts with a request, requests and
responses alternate, it ends with a request, every tool result answers a call in the response
right before it, and every call in a response that is not the last has its result in the
request right after it. `normalize` makes any history valid, reporting each repair; it never
touches the input list or its messages.

The package holds one idea a module: `_pairing` (the repair record, `analyze_pairs`,
`check_messages`), `_cuts` (`safe_cut_points`), `_call_ids` (`unique_call_ids`), `_validity`
(`validate_view` and the cheap "already valid?" check) and `_normalize` (`normalize` and its
repair passes, `patch_dangling_tool_calls`). Import from `pydantic_ai_context.integrity`.
"""

from __future__ import annotations

from ._call_ids import _readable_id as _readable_id
from ._call_ids import _unique_call_ids as _unique_call_ids
from ._call_ids import unique_call_ids
from ._cuts import _Cuts as _Cuts
from ._cuts import safe_cut_points
from ._normalize import INTERRUPTED_NOTE as INTERRUPTED_NOTE
from ._normalize import logger as logger
from ._normalize import normalize, normalize_with_repairs, patch_dangling_tool_calls
from ._pairing import PairingReport, Repair, RepairKind, ToolPair, analyze_pairs, check_messages
from ._pairing import _Checked as _Checked
from ._validity import _already_valid as _already_valid
from ._validity import _shape as _shape
from ._validity import _Validity as _Validity
from ._validity import validate_view

__all__ = (
    'PairingReport',
    'Repair',
    'RepairKind',
    'ToolPair',
    'analyze_pairs',
    'check_messages',
    'normalize',
    'normalize_with_repairs',
    'patch_dangling_tool_calls',
    'safe_cut_points',
    'unique_call_ids',
    'validate_view',
)
