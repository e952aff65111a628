"""Grader clients: how ``model_graded`` reaches the ``grader`` model role through acx.models.

- :class:`ModelLayerGrader` (the default): one call through :class:`acx.models.ModelClient` —
  the one HTTP client and retry layer of acx — to the grader's endpoint, in its protocol
  (``openai-chat``, ``openai-responses`` or ``anthropic``). The API key is resolved from its
  ``${VAR}`` reference only here, right before the call, and lives only in memory.
- :class:`GatewayGrader`: the call goes through an attempt's :class:`acx.models.GatewaySession`
  as role ``grader`` (keys injected, the call recorded and counted by the gateway). The
  interpreter does not start a per-run gateway yet; when it does, it passes one of these.
"""

from __future__ import annotations

import os
from typing import Any

from acx.components.scorers._model_graded import GraderError, GraderReply
from acx.ir import ModelSpec

__all__ = ["GatewayGrader", "ModelLayerGrader", "endpoint_for"]


def _usage(response: Any) -> dict[str, Any]:
    u = response.usage
    if u is None:
        return {}
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "cached_tokens": u.cached_tokens,
        "reasoning_tokens": u.reasoning_tokens,
    }


def _protocol(model: ModelSpec) -> str:
    from acx.models import PROTOCOLS

    proto = model.api_protocol
    if isinstance(proto, list):
        proto = next((p for p in proto if p in PROTOCOLS), None)
    return proto if isinstance(proto, str) and proto in PROTOCOLS else "openai-chat"


def endpoint_for(model: ModelSpec, *, timeout_seconds: float, max_retries: int, environ: Any = None) -> Any:
    """The acx.models Endpoint of the grader, its references resolved now (names only in errors)."""
    from acx.envref import substitute
    from acx.models import Endpoint

    env = os.environ if environ is None else environ
    base_url, missing = substitute(model.base_url or "", env)
    api_key: str | None = None
    if model.api_key:
        api_key, more = substitute(model.api_key, env)
        missing += more
    if missing:
        raise GraderError(f"environment variable(s) not set: {', '.join(sorted(set(missing)))}")
    return Endpoint(
        base_url=base_url.rstrip("/"),
        model=model.id or "",
        protocol=_protocol(model),  # type: ignore[arg-type]
        api_key=api_key or None,
        params=dict(model.params),
        read_timeout=timeout_seconds,
        total_timeout=timeout_seconds,
        max_retries=max_retries,
    )


class ModelLayerGrader:
    def __init__(self, *, max_retries: int = 2) -> None:
        self.max_retries = max_retries

    async def complete(
        self, model: ModelSpec, messages: list[dict[str, Any]], *, timeout_seconds: float
    ) -> GraderReply:
        from acx.models import ChatRequest, ModelCallError, ModelClient

        endpoint = endpoint_for(model, timeout_seconds=timeout_seconds, max_retries=self.max_retries)
        try:
            async with ModelClient() as client:
                response, _ = await client.complete(endpoint, ChatRequest(messages=messages))
        except ModelCallError as exc:
            raise GraderError(f"{exc.kind}: {exc}") from None
        if not response.content:
            raise GraderError("the grader returned no text")
        return GraderReply(text=response.content, usage=_usage(response))


class GatewayGrader:
    """Grades through a gateway session's ``grader`` role (the gateway holds the key)."""

    def __init__(self, session: Any, role: str = "grader") -> None:
        self.session = session
        self.role = role

    async def complete(
        self, model: ModelSpec, messages: list[dict[str, Any]], *, timeout_seconds: float
    ) -> GraderReply:
        import trio

        from acx.models import ChatRequest, ModelCallError

        try:
            with trio.fail_after(timeout_seconds):
                # The role's endpoint params apply; the scorer's own (temperature, max_tokens) win.
                request = ChatRequest(messages=messages, params=dict(model.params))
                response = await self.session.complete(request, role=self.role)
        except ModelCallError as exc:
            raise GraderError(f"{exc.kind}: {exc}") from None
        if not response.content:
            raise GraderError("the grader returned no text")
        return GraderReply(text=response.content, usage=_usage(response))
