"""The pydantic-ai integration: what the profile does as a capability and as a history processor.

- `request_path`: the hooks' bodies before each model request: per-attempt compile, the refusal of a
  view that cannot fit, the read-back instruction of a run (`RequestPath`, `ReadbackInstruction`).
- `recovery`: when the provider rejects a request as too long: learned limits and retries
  (`OverflowRecovery`; `_overflow` recognises a rejection, `_learned_limits` weighs what it taught).
- `processors`: the `history_processors` / `process_history()` adapter.

`ContextProfile` holds one of each and keeps thin hook methods that delegate to them (pydantic-ai
calls hooks by name on the capability). The rooms receive the profile through a Protocol; nothing
here imports `profiles`.
"""
