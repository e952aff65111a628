"""The model client: the only module of acx that imports the HTTP library (httpx).

Async under trio. Every request has explicit connect and read timeouts (httpx's 5 s default
would abort ordinary LLM generations) and every call a total deadline (a trio cancel scope around
the attempts and their waits). Retries follow :class:`acx.models.RetryPolicy` — this is the only
retry layer for model calls in acx. Connections per endpoint are capped by ``max_connections``.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import trio

from acx.models._protocols import build_call, parse_response
from acx.models._retry import RetryPolicy, classify_status, parse_retry_after
from acx.models._types import ChatRequest, Endpoint, ErrorKind, ModelCallError, ModelResponse

__all__ = ["AttemptRecord", "Exchange", "ModelClient", "chunks"]

T = TypeVar("T")


@dataclass
class AttemptRecord:
    """One HTTP attempt of a call (for transcripts): when, how long, what came back."""

    started_at: float
    duration_ms: float
    status: int | None
    error: str | None = None
    #: Seconds waited after this attempt before the next one.
    wait_seconds: float = 0.0


@dataclass
class Exchange:
    """A finished call: status, body and headers of the last attempt plus every attempt."""

    status: int
    body: bytes
    headers: dict[str, str]
    attempts: list[AttemptRecord] = field(default_factory=list)
    parsed: Any = None
    #: A streamed answer not read yet (``exchange(stream=True)``): read it with
    #: :meth:`ModelClient.chunks`, which also closes it.
    response: Any = None


class ModelClient:
    """Makes model calls. One instance per run (it pools connections per endpoint); close it with
    :meth:`aclose` or use it as an async context manager.

    ``transport`` replaces the network (``httpx.MockTransport`` in unit tests); ``rng`` fixes the
    jitter; ``retry`` the backoff rules (its ``max_retries`` is replaced by each endpoint's).
    """

    def __init__(
        self,
        *,
        retry: RetryPolicy | None = None,
        transport: Any = None,
        rng: random.Random | None = None,
        trust_env: bool = True,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._transport = transport
        self._rng = rng or random.Random()
        self._trust_env = trust_env
        self._clients: dict[tuple[Any, ...], httpx.AsyncClient] = {}

    async def __aenter__(self) -> ModelClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        with trio.CancelScope(shield=True):
            for c in clients:
                await c.aclose()

    def _http(self, endpoint: Endpoint) -> httpx.AsyncClient:
        key = (endpoint.base_url, endpoint.max_connections, endpoint.connect_timeout, endpoint.read_timeout)
        client = self._clients.get(key)
        if client is None:
            timeout = httpx.Timeout(
                connect=endpoint.connect_timeout,
                read=endpoint.read_timeout,
                write=endpoint.read_timeout,
                pool=None,  # waiting for a free connection is bounded by the call's total deadline
            )
            limits = httpx.Limits(
                max_connections=endpoint.max_connections, max_keepalive_connections=endpoint.max_connections
            )
            client = httpx.AsyncClient(
                timeout=timeout, limits=limits, transport=self._transport, trust_env=self._trust_env
            )
            self._clients[key] = client
        return client

    # ---- calls -----------------------------------------------------------------------------------
    async def complete(self, endpoint: Endpoint, request: ChatRequest) -> tuple[ModelResponse, Exchange]:
        """One model call in ``endpoint.protocol``: the normalised answer and the exchange."""
        url, body, headers = build_call(endpoint, request)
        ex = await self.exchange(
            endpoint, url, body, headers, parse=lambda data: parse_response(endpoint.protocol, data)
        )
        return ex.parsed, ex

    async def exchange(
        self,
        endpoint: Endpoint,
        url: str,
        body: dict[str, Any],
        headers: dict[str, str],
        *,
        parse: Callable[[bytes], Any] | None = None,
        stream: bool = False,
    ) -> Exchange:
        """POST ``body`` to ``url`` with retries. A 200 whose body ``parse`` rejects (raising a
        ``malformed_response`` :class:`ModelCallError`) is retried like a 5xx. Raises
        :class:`ModelCallError` when the call fails for good. With ``stream=True`` a 2xx answer
        is returned unread (``Exchange.response``, read with :func:`chunks`): retries happen
        only before an answer starts."""
        attempts: list[AttemptRecord] = []
        deadline = endpoint.total_timeout
        try:
            with trio.fail_after(deadline) if deadline is not None else _nullscope():
                return await self._attempts(endpoint, url, body, headers, parse, attempts, stream)
        except trio.TooSlowError:
            exc = ModelCallError(
                "timeout",
                f"the model call did not finish within its total deadline of {deadline:g} s "
                f"({len(attempts)} attempt(s))",
                attempts=len(attempts),
            )
            exc.records = list(attempts)
            raise exc from None
        except ModelCallError as exc:
            exc.records = list(attempts)
            raise

    async def _attempts(
        self,
        endpoint: Endpoint,
        url: str,
        body: dict[str, Any],
        headers: dict[str, str],
        parse: Callable[[bytes], Any] | None,
        attempts: list[AttemptRecord],
        stream: bool = False,
    ) -> Exchange:
        client = self._http(endpoint)
        policy = self.retry
        retry_index = 0
        while True:
            started = time.time()
            t0 = trio.current_time()
            failure: ModelCallError
            try:
                if stream:
                    request = client.build_request("POST", url, json=body, headers=headers)
                    resp = await client.send(request, stream=True)
                else:
                    resp = await client.post(url, json=body, headers=headers)
            except httpx.TimeoutException as exc:
                kind: ErrorKind = "connection" if isinstance(exc, httpx.ConnectTimeout) else "timeout"
                failure = ModelCallError(kind, _transport_message(exc, endpoint))
                attempts.append(AttemptRecord(started, _ms(t0), None, failure.message))
            except httpx.HTTPError as exc:
                failure = ModelCallError("connection", _transport_message(exc, endpoint))
                attempts.append(AttemptRecord(started, _ms(t0), None, failure.message))
            else:
                rec = AttemptRecord(started, _ms(t0), resp.status_code)
                attempts.append(rec)
                if stream and 200 <= resp.status_code < 300:
                    return Exchange(resp.status_code, b"", dict(resp.headers), attempts, response=resp)
                if stream:
                    try:
                        await resp.aread()
                    finally:
                        await resp.aclose()
                data = resp.content
                if 200 <= resp.status_code < 300:
                    try:
                        parsed = parse(data) if parse is not None else None
                    except ModelCallError as exc:
                        failure = exc
                        rec.error = exc.message
                    else:
                        return Exchange(resp.status_code, data, dict(resp.headers), attempts, parsed)
                else:
                    kind = classify_status(resp.status_code, data)
                    retry_after = parse_retry_after(resp.headers, time.time())
                    failure = ModelCallError(
                        kind,
                        f"HTTP {resp.status_code} from the model endpoint: {_error_text(data)}",
                        status=resp.status_code,
                        retry_after=retry_after,
                    )
                    rec.error = failure.message
                    if not policy.retryable(kind):
                        # 4xx other than 408/409/429 are the caller's problem: pass the server's
                        # answer through unchanged (the gateway forwards it to the agent).
                        failure.attempts = len(attempts)
                        failure.body = data
                        raise _scrubbed(failure, endpoint)
            if not policy.retryable(failure.kind) or retry_index >= endpoint.max_retries:
                failure.attempts = len(attempts)
                if retry_index:
                    failure.message = f"{failure.message} (after {len(attempts)} attempts)"
                raise _scrubbed(failure, endpoint)
            wait = policy.delay(retry_index, failure.retry_after, self._rng)
            remaining = trio.current_effective_deadline() - trio.current_time()
            if wait is None or wait >= remaining:
                failure.attempts = len(attempts)
                why = (
                    f"the server asked to retry after {failure.retry_after:g} s"
                    if failure.retry_after is not None
                    else f"the next retry would wait {wait:g} s"
                )
                failure.message = f"{failure.message}; gave up: {why}, past the call's deadline or the retry cap"
                raise _scrubbed(failure, endpoint)
            attempts[-1].wait_seconds = round(wait, 3)
            await trio.sleep(wait)
            retry_index += 1


async def chunks(ex: Exchange) -> AsyncIterator[bytes]:
    """The bytes of a streamed answer as they arrive; closes the response at the end (or when
    the consumer stops). A transport failure mid-stream ends the stream early."""
    resp = ex.response
    try:
        async for chunk in resp.aiter_raw():
            yield chunk
    except httpx.HTTPError:
        return
    finally:
        with trio.CancelScope(shield=True):
            await resp.aclose()


def _scrubbed(exc: ModelCallError, endpoint: Endpoint) -> ModelCallError:
    """Servers echo keys in error messages ("Incorrect API key provided: sk-..."): cut them out."""
    for secret in {endpoint.api_key, endpoint.credential()}:
        if secret and len(secret) >= 4:
            exc.message = exc.message.replace(secret, "***")
            if exc.body is not None:
                exc.body = exc.body.replace(secret.encode(), b"***")
    exc.args = (exc.message,)
    return exc


class _nullscope:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _ms(t0: float) -> float:
    return round((trio.current_time() - t0) * 1000.0, 3)


def _transport_message(exc: BaseException, endpoint: Endpoint) -> str:
    """A transport failure in words, without the URL's query or any header."""
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint.base_url)
    where = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    name = type(exc).__name__
    if isinstance(exc, httpx.ConnectTimeout):
        return f"could not connect to the model endpoint {where} within {endpoint.connect_timeout:g} s ({name})"
    if isinstance(exc, httpx.TimeoutException):
        return f"the model endpoint {where} sent nothing for {endpoint.read_timeout:g} s ({name})"
    return f"connection to the model endpoint {where} failed ({name})"


def _error_text(data: bytes) -> str:
    """The server's error message (OpenAI/Anthropic error shapes), else a body excerpt."""
    import json

    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
        if isinstance(body.get("message"), str):
            return str(body["message"])[:500]
    text = data[:300].decode("utf-8", "replace").strip()
    return text or "(empty body)"
