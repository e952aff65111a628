"""The model layer: protocol adapters, the one HTTP client and retry layer, prices and limits,
and the per-run gateway every model call of a run goes through (see docs/models.md).

This package is acx's one HTTP edge: the client (``acx.models._client``) and the gateway's server
(``acx.models._http_server``), both acx's own HTTP/1.1 on trio streams (no HTTP library).
"""

from acx.models._accounting import Limits, Price, UsageTotals, cost_of
from acx.models._cache import CACHE_MODES, CacheMode, CacheStats, CallCache, cache_key, canonical_request
from acx.models._cache import DEFAULT_MAX_BYTES as DEFAULT_CACHE_MAX_BYTES
from acx.models._client import AttemptRecord, Exchange, ModelClient, chunks
from acx.models._config import (
    cache_modes,
    current_session,
    limits_for,
    resolve_protocol,
    roles_for,
    use_session,
    uses_models,
)
from acx.models._gateway import CallRecord, Gateway, GatewaySession, Role
from acx.models._keep import KEPT_TEXT_CHARS, MAX_ATTEMPT_RECORD_BYTES, MAX_CALL_RECORD_BYTES, OFF_THREAD_BYTES
from acx.models._protocols import (
    build_call,
    call_path,
    normalize_request,
    parse_response,
    parse_stream,
    render_response,
)
from acx.models._replay import Replay
from acx.models._retry import RetryPolicy, classify_status, parse_retry_after
from acx.models._trajectory import actf_trajectory
from acx.models._types import PROTOCOLS, ChatRequest, Endpoint, ModelCallError, ModelResponse, Protocol, ToolCall, Usage

__all__ = [
    "CACHE_MODES",
    "DEFAULT_CACHE_MAX_BYTES",
    "KEPT_TEXT_CHARS",
    "MAX_ATTEMPT_RECORD_BYTES",
    "MAX_CALL_RECORD_BYTES",
    "OFF_THREAD_BYTES",
    "PROTOCOLS",
    "AttemptRecord",
    "CacheMode",
    "CacheStats",
    "CallCache",
    "CallRecord",
    "ChatRequest",
    "Endpoint",
    "Exchange",
    "Gateway",
    "GatewaySession",
    "Limits",
    "ModelCallError",
    "ModelClient",
    "ModelResponse",
    "Price",
    "Protocol",
    "Replay",
    "RetryPolicy",
    "Role",
    "ToolCall",
    "Usage",
    "UsageTotals",
    "actf_trajectory",
    "build_call",
    "cache_key",
    "cache_modes",
    "call_path",
    "canonical_request",
    "chunks",
    "classify_status",
    "cost_of",
    "current_session",
    "limits_for",
    "normalize_request",
    "parse_response",
    "parse_retry_after",
    "parse_stream",
    "render_response",
    "resolve_protocol",
    "roles_for",
    "use_session",
    "uses_models",
]
