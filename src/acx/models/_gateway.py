"""The per-run model gateway: the one path from any agent to any model.

A :class:`Gateway` holds the run's model roles (endpoint + real key + price), the model client,
and the run's totals. Each attempt opens a :class:`GatewaySession`:

- host-side harnesses call :meth:`GatewaySession.complete` in-process;
- in-sandbox agents get :meth:`GatewaySession.env` — the gateway's URL and a per-session token in
  ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` and ``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY`` — and
  call the gateway's HTTP endpoint, which swaps the token for the real key upstream.

Either way the call is checked against the session's limits and the run's cost limit, made with
the one retry layer, recorded (request, response, timing, usage, cost, attempts) and counted. A
session's tokens stop working when it closes. The real key is held only in memory here and in the
client's auth header; it is never in a record, an env map or a message.

Inside, the gateway is its parts: ``_Ledger`` (call records, limit refusals, totals, the run's
cost limit), ``_RoleKeys`` (each role's key forms and upstream routes), ``_Answers`` (an answer
from the model, the model-call cache or the replayed run) and ``_HttpFront`` (the HTTP endpoint).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
import trio

from acx.models._accounting import Limits, Price, UsageTotals, cost_of
from acx.models._cache import CachedAnswer, CachedResponse, CallCache, cache_key, reads, writes
from acx.models._client import AttemptRecord, Exchange, ModelClient, chunks
from acx.models._http_server import Reply, serve_http
from acx.models._keep import OFF_THREAD_BYTES, keep_within_caps
from acx.models._protocols import (
    auth_headers,
    build_call,
    call_path,
    loads,
    normalize_request,
    parse_response,
    parse_stream,
    render_response,
    request_problem,
    translatable_params,
)
from acx.models._replay import Replay, ReplayCursor, first_difference, render_stream
from acx.models._scrub import RelayScrubber, scrub_response, secret_forms
from acx.models._types import ChatRequest, Endpoint, ModelCallError, ModelResponse, Protocol, Usage
from acx.secrets import is_secret_value

__all__ = ["CallRecord", "Gateway", "GatewaySession", "Role", "iso_now"]

TOKEN_PREFIX = "acx-gw-"

_PATHS: dict[str, Protocol] = {
    "/v1/chat/completions": "openai-chat",
    "/chat/completions": "openai-chat",
    "/v1/responses": "openai-responses",
    "/responses": "openai-responses",
    "/v1/messages": "anthropic",
    "/messages": "anthropic",
}


def iso_now(ts: float | None = None) -> str:
    """ISO 8601 UTC with milliseconds (the trajectories' timestamp form).

    ``datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")`` with ``Z``, exactly
    (the fraction rounded half-even to microseconds, as datetime does, then cut to milliseconds);
    the date-and-seconds part is remembered per second: a transcript and its trajectory format a
    hundred timestamps per 20-turn attempt, most of them in the same few seconds."""
    if ts is None:
        ts = time.time()
    frac, whole = math.modf(ts)
    micros = round(frac * 1e6)
    if micros >= 1_000_000:
        micros -= 1_000_000
        whole += 1.0
    elif micros < 0:  # before 1970: datetime borrows a second
        micros += 1_000_000
        whole -= 1.0
    second = int(whole)
    prefix = _ISO_SECONDS.get(second)
    if prefix is None:
        if len(_ISO_SECONDS) >= 256:
            _ISO_SECONDS.clear()
        prefix = _ISO_SECONDS[second] = datetime.fromtimestamp(second, tz=UTC).isoformat()[:-6]
    return f"{prefix}.{micros // 1000:03d}Z"


#: whole second → ``YYYY-MM-DDTHH:MM:SS`` (bounded: cleared when full).
_ISO_SECONDS: dict[int, str] = {}


@dataclass(frozen=True)
class Role:
    """One model of the run, by role (``agent``, ``grader``, ...)."""

    name: str
    endpoint: Endpoint
    price: Price | None = None
    #: This role's own per-task limits (beside the session's limits for all roles together).
    limits: Limits = field(default_factory=Limits)
    #: ``model.cache`` of the role (acx.models._cache): off, read, write, read-write, replay.
    cache: str = "off"


@dataclass
class CallRecord:
    """One model call as the transcript keeps it (secrets scrubbed, no headers)."""

    seq: int
    role: str
    model: str
    protocol: str
    #: ``in-process`` (a host-side harness) or ``http`` (an agent calling the gateway).
    via: str
    started_at: float
    finished_at: float = 0.0
    request: Any = None
    response: Any = None
    status: int | None = None
    usage: dict[str, int] | None = None
    cost_usd: float | None = None
    attempts: list[AttemptRecord] = field(default_factory=list)
    error: dict[str, str] | None = None
    #: Normalised views for trajectories (not serialised); an HTTP call's request is normalised
    #: only when a trajectory asks for it (:meth:`chat_request`), off the call's path.
    normalized_request: ChatRequest | None = None
    normalized_response: ModelResponse | None = None
    #: Values cut out of ``request``/``response`` when the record is serialised (the role's key).
    secrets: tuple[str, ...] = ()
    #: Answered from the model-call cache (or a replayed run): nothing was paid for it.
    cached: bool = False
    #: The call's cache key (``None``: the role's cache is off).
    cache_key: str | None = None
    #: What the host-side harness that made the call said about it (:meth:`GatewaySession.annotate`):
    #: extra keys of the call's trajectory step, e.g. terminus's ``context_management``.
    annotations: dict[str, Any] = field(default_factory=dict)

    def chat_request(self) -> ChatRequest | None:
        if self.normalized_request is None and isinstance(self.request, dict):
            try:
                self.normalized_request = normalize_request(self.protocol, self.request)  # type: ignore[arg-type]
            except Exception:  # an odd body still went upstream; only its trajectory view is lost
                return None
        return self.normalized_request

    def _scrubbed(self, obj: Any) -> Any:
        if not self.secrets or obj is None:
            return obj
        if not _may_hold(obj, self.secrets):
            return obj
        try:
            text = json.dumps(obj)
        except (RecursionError, ValueError, TypeError):
            # Nested deeper than the encoder goes (the decoder took it, barely): not recorded
            # rather than recorded with what may be the key inside.
            return {"acx_note": "not recorded: the value could not be checked for secrets"}
        # Looked for as encoded (a key with a quote or a non-ASCII character is escaped in the text).
        escaped = [json.dumps(s)[1:-1] for s in self.secrets]
        if not any(e in text for e in escaped):
            return obj
        for e in escaped:
            text = text.replace(e, "***")
        return json.loads(text)

    @property
    def duration_ms(self) -> float:
        return round((self.finished_at - self.started_at) * 1000.0, 3)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "role": self.role,
            "model": self.model,
            "protocol": self.protocol,
            "via": self.via,
            "started_at": iso_now(self.started_at),
            "finished_at": iso_now(self.finished_at),
            "duration_ms": self.duration_ms,
            "status": self.status,
            "usage": self.usage,
            "cost_usd": self.cost_usd,
            "retries": max(0, len(self.attempts) - 1),
            "attempts": [
                {
                    "started_at": iso_now(a.started_at),
                    "duration_ms": a.duration_ms,
                    "status": a.status,
                    "error": a.error,
                    "wait_seconds": a.wait_seconds,
                }
                for a in self.attempts
            ],
            "error": self.error,
            **({"cached": True} if self.cached else {}),
            "request": self._scrubbed(self.request),
            "response": self._scrubbed(self.response),
        }


class GatewaySession:
    """The model access of one attempt: in-process calls, sandbox env, transcript and totals."""

    def __init__(self, gateway: Gateway, key: str, limits: Limits) -> None:
        self.gateway = gateway
        self.key = key
        self.limits = limits
        self.calls: list[CallRecord] = []
        #: Occurrences of the real key cut out of answers before the agent saw them (M4).
        self.secrets_cut = 0
        #: Streamed answers that ended before their end, and why (each an issue of the attempt).
        self.stream_cuts: list[str] = []
        #: Bytes of requests and answers the records keep, and the calls whose records were cut
        #: to the storage caps (acx.models._keep; a ``model_record_cut`` issue of the attempt).
        self.recorded_bytes = 0
        self.record_cuts: list[str] = []
        self.totals = UsageTotals()
        #: The same per role (for the roles' own limits).
        self.role_totals: dict[str, UsageTotals] = {}
        #: Messages of the limit refusals (each one is a ``limit_exceeded`` issue of the attempt).
        self.refusals: list[str] = []
        #: Calls a ``replay`` cache could not answer (each one a ``cache_miss`` issue), calls that
        #: differ from the replayed run's (``replay_diverged``), and cache writes that failed.
        self.cache_misses: list[str] = []
        self.replay_divergences: list[str] = []
        self.cache_errors: list[str] = []
        #: ``acx run --replay``: where this session is in the replayed run's calls.
        self.replay: ReplayCursor | None = gateway.replay.cursor(key) if gateway.replay is not None else None
        self.closed = False
        #: The address sandboxes reach the gateway at (set by the interpreter per driver);
        #: ``None`` = loopback.
        self.sandbox_host: str | None = None
        #: Tool results a host-side agent loop reported ((index of the call in ``calls`` that asked
        #: for the tool, tool call id) → content, timing), so the trajectory has every observation
        #: — the last turn's too, which no later call carries. Ids repeat across turns on some
        #: servers, hence the call index in the key.
        self.tool_results: dict[tuple[int, str], dict[str, Any]] = {}
        self._tokens = {role: _new_token() for role in gateway.roles}
        #: Who this session's calls are counted against in the endpoints' fair slot sharing.
        self.owner = f"{key}#{_new_token()[-8:]}"
        #: Cancel scopes of the session's calls in flight: closing the session cancels them.
        self.in_flight: set[trio.CancelScope] = set()

    def token(self, role: str = "agent") -> str:
        if role not in self._tokens:
            raise KeyError(f"the run has no model role {role!r} (roles: {', '.join(sorted(self._tokens))})")
        return self._tokens[role]

    async def complete(self, request: ChatRequest, *, role: str = "agent") -> ModelResponse:
        """A model call from a host-side harness. Raises :class:`ModelCallError` (including
        ``limit_exceeded`` when a limit refuses it)."""
        return await self.gateway._call_in_process(self, role, request)

    def record_tool_result(self, call_id: str, content: str, *, duration_ms: int, **meta: Any) -> None:
        """What a tool call of this session's model produced (observation, time taken, and
        e.g. ``exit_code``/``timed_out``); used by :func:`acx.models.actf_trajectory`. It belongs
        to the latest call whose answer asked for ``call_id``."""
        for index in range(len(self.calls) - 1, -1, -1):
            resp = self.calls[index].normalized_response
            if resp is not None and any(t.id == call_id for t in resp.tool_calls):
                self.tool_results[(index, call_id)] = {"content": content, "duration_ms": int(duration_ms), **meta}
                return

    def annotate(self, response: ModelResponse, **fields: Any) -> None:
        """Extra keys for the trajectory step of the call that answered ``response`` (a host-side
        harness's own account of the call, e.g. that it asked for a summary of the conversation).
        A response that is not one of this session's answers is an error of the caller's."""
        for rec in reversed(self.calls):
            if rec.normalized_response is response:
                rec.annotations.update(fields)
                return
        raise ValueError("annotate: the response is not an answer of this session's calls")

    def env(self, role: str = "agent", *, host: str | None = None) -> dict[str, str]:
        """Variables for an agent in a sandbox: the gateway's URLs and this session's token in
        place of any real base URL and key. ``host`` is the address the sandbox reaches the
        gateway at (default: loopback)."""
        url = self.gateway.url(host or self.sandbox_host)
        token = self.token(role)
        ep = self.gateway.roles[role].endpoint
        return {
            "OPENAI_BASE_URL": f"{url}/v1",
            "OPENAI_API_KEY": token,
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": token,
            "ACX_MODEL_ID": ep.model,
            "ACX_MODEL_PROTOCOL": ep.protocol,
            "ACX_MODEL_BASE_URL": f"{url}/v1" if ep.protocol != "anthropic" else url,
            "ACX_MODEL_API_KEY": token,
        }

    def close(self) -> None:
        """End the session: its tokens are refused from now on, and its calls still in flight are
        cancelled at once — an agent that exits with calls pending must not keep the endpoint's
        connection slots from the other attempts until the upstream answers or times out."""
        if not self.closed:
            self.closed = True
            self.gateway._forget(self)
            for scope in self.in_flight:
                scope.cancel()

    def transcript(self) -> list[dict[str, Any]]:
        return [c.to_dict() for c in self.calls]

    def usage(self) -> dict[str, Any]:
        """Totals of the session, with a per-role breakdown."""
        out: dict[str, Any] = dict(self.totals.to_dict())
        by_role: dict[str, UsageTotals] = {}
        for c in self.calls:
            if c.error is not None and c.error.get("kind") == "limit_exceeded":
                continue  # refused by acx: never made
            t = by_role.setdefault(c.role, UsageTotals())
            t.merge(_one(c))
        out["by_role"] = {r: t.to_dict() for r, t in sorted(by_role.items())}
        return out


def _may_hold(obj: Any, secrets: tuple[str, ...]) -> bool:
    """False only when no string of ``obj`` holds one of ``secrets``: a search in its msgspec JSON
    encoding (C speed; a transcript holds the growing conversation once per call). Escaping and
    UTF-8 are per character, so a string holding a secret holds the secret's encoding."""
    try:
        data = msgspec.json.encode(obj)
        return any(msgspec.json.encode(s)[1:-1] in data for s in secrets)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return True  # not plain JSON: the full check decides


def _one(c: CallRecord) -> UsageTotals:
    t = UsageTotals()
    if c.error is not None:
        t.add_failed()
        return t
    u = Usage(**{k: v for k, v in c.usage.items() if k != "total_tokens"}) if c.usage else None
    t.add(u, c.cost_usd, cached=c.cached)
    return t


class Gateway:
    """The run's gateway. ``async with Gateway(...)`` or :meth:`start` inside a nursery.

    ``run_max_cost_usd``: when the run's cost reaches it, every later call is refused and
    ``on_run_limit(message)`` is called once (the interpreter stops dispatching tasks).
    """

    def __init__(
        self,
        roles: Mapping[str, Role],
        *,
        client: ModelClient | None = None,
        run_max_cost_usd: float | None = None,
        on_run_limit: Callable[[str], None] | None = None,
        cache: CallCache | None = None,
        replay: Replay | None = None,
    ) -> None:
        self.roles = dict(roles)
        #: ``acx run --replay RUN_DIR``: every call is answered from that run's transcripts.
        self.replay = replay
        #: The model-call cache of the roles whose ``cache`` mode is not ``off``.
        self.cache = cache
        self.client = client or ModelClient()
        self._own_client = client is None
        self._sessions: dict[str, tuple[GatewaySession, str]] = {}
        self._ports: dict[str, int] = {}
        self._scopes: list[trio.CancelScope] = []
        self._ledger = _Ledger(run_max_cost_usd, on_run_limit)
        self._keys = _RoleKeys()
        self._answers = _Answers(self.roles, self.client, cache, replay, self._keys)
        self._http = _HttpFront(
            self.roles, self._sessions, self._ledger, self._keys, self._answers, self._call_in_process
        )

    @property
    def totals(self) -> UsageTotals:
        """The run's totals (every session's calls)."""
        return self._ledger.totals

    @property
    def run_stopped(self) -> str | None:
        """Why the run's calls are refused from now on (its cost limit), or None."""
        return self._ledger.run_stopped

    @property
    def run_max_cost_usd(self) -> float | None:
        return self._ledger.run_max_cost_usd

    @property
    def on_run_limit(self) -> Callable[[str], None] | None:
        return self._ledger.on_run_limit

    # ---- lifecycle -------------------------------------------------------------------------------
    async def start(self, nursery: trio.Nursery, hosts: tuple[str, ...] = ("127.0.0.1",)) -> None:
        """Serve HTTP on each of ``hosts`` (port chosen by the OS; the same port when free)."""
        first = 0
        for host in hosts:
            port = await nursery.start(self._serve, host, first)
            self._ports[host] = port
            first = first or port

    async def _serve(
        self, host: str, port: int, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
    ) -> None:
        scope = trio.CancelScope()
        self._scopes.append(scope)
        with scope:
            try:
                await serve_http(self._handle, host, port, task_status=task_status)
            except OSError:
                if port == 0:
                    raise
                # The port is taken on this address: any free one will do.
                await serve_http(self._handle, host, 0, task_status=task_status)

    async def aclose(self) -> None:
        for scope in self._scopes:
            scope.cancel()
        for session, _ in list(self._sessions.values()):
            session.close()
        if self._own_client:
            await self.client.aclose()

    def url(self, host: str | None = None) -> str:
        host = host or "127.0.0.1"
        if host not in self._ports:
            raise RuntimeError(
                f"the gateway does not listen on {host} (it serves {', '.join(self._ports) or 'nothing'})"
            )
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self._ports[host]}"

    @property
    def hosts(self) -> list[str]:
        return list(self._ports)

    def port(self, host: str = "127.0.0.1") -> int:
        return self._ports[host]

    # ---- sessions --------------------------------------------------------------------------------
    def open_session(self, key: str, limits: Limits | None = None) -> GatewaySession:
        session = GatewaySession(self, key, limits or Limits())
        for role, token in session._tokens.items():
            self._sessions[token] = (session, role)
        self.client.open_owner(session.owner)
        return session

    def _forget(self, session: GatewaySession) -> None:
        for token in session._tokens.values():
            self._sessions.pop(token, None)
        self.client.close_owner(session.owner)

    # ---- calls -----------------------------------------------------------------------------------
    async def _call_in_process(
        self,
        session: GatewaySession,
        role_name: str,
        request: ChatRequest,
        *,
        via: str = "in-process",
        request_bytes: int = 0,
    ) -> ModelResponse:
        role = self._role(role_name)
        ep = role.endpoint
        why = self._ledger.refusal(session, role)
        if why is not None:
            raise self._ledger.refuse(session, role, ep.protocol, via, why)
        url, body, headers = build_call(ep, request)
        rec = self._ledger.record(session, role, ep.protocol, via)
        rec.request = body
        rec.secrets = self._keys.secrets(role)
        rec.normalized_request = request
        try:
            ex = await self._answers.exchange(
                session, rec, ep, url, body, headers, parse=lambda d: parse_response(ep.protocol, d)
            )
        except ModelCallError as exc:
            self._ledger.failed(session, rec, exc)
            raise
        finally:
            if not rec.finished_at:
                rec.finished_at = time.time()
        if ex is None:
            raise ModelCallError("cancelled", rec.error["message"] if rec.error else "cancelled")
        rec.finished_at = time.time()
        # A host-side harness (and a translated answer) gets the answer without the key (M4).
        resp, cut = scrub_response(ex.parsed, rec.secrets)
        session.secrets_cut += cut
        rec.attempts = ex.attempts
        rec.status = ex.status
        rec.response = resp.raw
        rec.normalized_response = resp
        keep_within_caps(rec, session, answer_bytes=len(ex.body), request_bytes=request_bytes)
        self._ledger.account(session, role, rec, resp)
        return resp

    def _role(self, name: str) -> Role:
        if name not in self.roles:
            raise ModelCallError(
                "refused", f"the run has no model role {name!r} (roles: {', '.join(sorted(self.roles))})"
            )
        return self.roles[name]

    # ---- HTTP ------------------------------------------------------------------------------------
    async def _handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Reply:
        return await self._http.handle(method, target, headers, body)


class _RoleKeys:
    """Per role, computed once: the forms of its key cut out of records and answers, and the
    upstream route of each protocol a call is passed through in."""

    def __init__(self) -> None:
        self._secrets: dict[str, tuple[str, ...]] = {}
        self._forms: dict[str, tuple[bytes, ...]] = {}
        self._routes: dict[tuple[str, str], tuple[str, dict[str, str]]] = {}

    def secrets(self, role: Role) -> tuple[str, ...]:
        # Per role, once: the wrapped credential is a base64 encoding per call otherwise.
        found = self._secrets.get(role.name)
        if found is None:
            ep = role.endpoint
            # Not a placeholder (`api_key: none`) or a too-short literal: cutting "none" out of
            # every answer would mangle text and protect nothing (the W0305 rule).
            found = tuple(x for x in {ep.api_key, ep.credential()} if x and is_secret_value(x))
            self._secrets[role.name] = found
        return found

    def scrubber(self, role: Role) -> RelayScrubber:
        """A fresh scrubber of the role's key forms (computed once per role)."""
        forms = self._forms.get(role.name)
        if forms is None:
            forms = self._forms[role.name] = secret_forms(self.secrets(role))
        return RelayScrubber(forms)

    def upstream(self, role: Role, protocol: Protocol) -> tuple[str, dict[str, str]]:
        """URL and auth headers of a call passed through in ``protocol`` (per role, once)."""
        key = (role.name, protocol)
        found = self._routes.get(key)
        if found is None:
            ep = role.endpoint
            found = (call_path(protocol, ep.base_url), auth_headers(protocol, ep.credential(), ep.anthropic_version))
            self._routes[key] = found
        return found


class _Ledger:
    """Each call's record in its session, the limit refusals, and what the calls used and cost —
    per session, per role, and for the run (whose cost limit stops it)."""

    def __init__(self, run_max_cost_usd: float | None, on_run_limit: Callable[[str], None] | None) -> None:
        self.run_max_cost_usd = run_max_cost_usd
        self.on_run_limit = on_run_limit
        self.totals = UsageTotals()
        self.run_stopped: str | None = None
        self._seq = 0

    def refusal(self, session: GatewaySession, role: Role | None = None) -> str | None:
        if session.closed:
            return "the session is closed"
        if self.run_stopped is not None:
            return self.run_stopped
        if role is not None and role.limits != Limits():
            why = role.limits.refusal(session.role_totals.get(role.name, UsageTotals()))
            if why is not None:
                return f"the {role.name} role's {why}"
        return session.limits.refusal(session.totals)

    def record(self, session: GatewaySession, role: Role, protocol: str, via: str) -> CallRecord:
        self._seq += 1
        rec = CallRecord(
            seq=len(session.calls) + 1,
            role=role.name,
            model=role.endpoint.model,
            protocol=protocol,
            via=via,
            started_at=time.time(),
        )
        session.calls.append(rec)
        return rec

    def refuse(self, session: GatewaySession, role: Role, protocol: str, via: str, why: str) -> ModelCallError:
        msg = f"acx refused the model call: {why}"
        rec = self.record(session, role, protocol, via)
        rec.finished_at = rec.started_at
        rec.error = {"kind": "limit_exceeded", "message": msg}
        if not session.closed:
            session.refusals.append(msg)
        return ModelCallError("limit_exceeded", msg)

    def account(self, session: GatewaySession, role: Role, rec: CallRecord, resp: ModelResponse | None) -> None:
        usage = resp.usage if resp is not None else None
        cost = cost_of(usage, role.price) if resp is not None else None
        if resp is None:
            return
        rec.usage = usage.to_dict() if usage is not None else None
        rec.cost_usd = None if cost is None else round(cost, 10)
        # A cached answer counts as consumed (token and call limits) but not as paid (cost).
        session.totals.add(usage, cost, cached=rec.cached)
        session.role_totals.setdefault(role.name, UsageTotals()).add(usage, cost, cached=rec.cached)
        self.totals.add(usage, cost, cached=rec.cached)
        limit = self.run_max_cost_usd
        if limit is not None and self.run_stopped is None:
            if self.totals.cost_unknown:
                self.stop_run(f"the run's max_cost_usd = {limit:g} cannot be enforced: a call's cost is unknown")
            elif self.totals.cost_usd >= limit:
                self.stop_run(f"the run's max_cost_usd = {limit:g} reached (${self.totals.cost_usd:.6f} spent)")

    def failed(self, session: GatewaySession, rec: CallRecord, exc: ModelCallError) -> None:
        rec.finished_at = time.time()
        rec.status = exc.status
        rec.error = {"kind": exc.kind, "message": exc.message}
        rec.attempts = [a for a in exc.records if isinstance(a, AttemptRecord)]
        session.totals.add_failed()
        session.role_totals.setdefault(rec.role, UsageTotals()).add_failed()
        self.totals.add_failed()

    def stop_run(self, message: str) -> None:
        self.run_stopped = message
        if self.on_run_limit is not None:
            self.on_run_limit(message)


class _Answers:
    """Where a call's answer comes from: the model (through the client, counted against the
    session in the fair slot sharing), the model-call cache, or the replayed run."""

    def __init__(
        self,
        roles: dict[str, Role],
        client: ModelClient,
        cache: CallCache | None,
        replay: Replay | None,
        keys: _RoleKeys,
    ) -> None:
        self.roles = roles
        self.client = client
        self.cache = cache
        self.replay = replay
        self.keys = keys

    async def exchange(self, session: GatewaySession, rec: CallRecord, *args: Any, **kwargs: Any) -> Any:
        """``client.exchange`` for one of ``session``'s calls, counted against the session in
        the fair slot sharing; ``None`` (the call recorded ``cancelled``) when the session
        closed first. A client that hung up cancels it from outside: recorded, then re-raised."""
        if session.replay is not None:
            return self._replayed(session, rec, args[2], kwargs.get("parse"), bool(kwargs.get("stream")))
        mode = self.cache_mode(rec.role)
        if mode != "off":
            rec.cache_key = cache_key(rec.protocol, args[2])
            if reads(mode):
                hit = await self._cache_hit(rec, kwargs.get("parse"), bool(kwargs.get("stream")))
                if hit is not None:
                    return hit
                if mode == "replay":
                    raise self._cache_miss(session, rec)
        scope = trio.CancelScope()
        session.in_flight.add(scope)
        try:
            with scope:
                ex = await self.client.exchange(*args, owner=session.owner, **kwargs)
                if writes(mode) and not kwargs.get("stream"):
                    await self.cache_store(session, rec, ex.body)
                return ex
            _mark_abandoned(rec, "its attempt ended while the call was in flight")
            return None
        except trio.Cancelled:
            _mark_abandoned(rec, "the agent hung up (or the run stopped) while the call was in flight")
            raise
        finally:
            session.in_flight.discard(scope)

    # ---- the model-call cache --------------------------------------------------------------------
    def cache_mode(self, role_name: str) -> str:
        role = self.roles.get(role_name)
        return role.cache if role is not None and self.cache is not None else "off"

    async def _cache_hit(self, rec: CallRecord, parse: Callable[[bytes], Any] | None, stream: bool) -> Any:
        """The cached answer of ``rec``'s request as the exchange the client would have returned,
        or ``None`` (a miss, or an entry that no longer parses: the upstream answers instead)."""
        cache, key = self.cache, rec.cache_key
        assert cache is not None and key is not None
        # A small entry is read on the trio thread (cheaper than the thread hop); a big one not.
        entry = cache.get(key, max_bytes=OFF_THREAD_BYTES)
        if isinstance(entry, int):
            entry = await trio.to_thread.run_sync(cache.get, key)
        if not isinstance(entry, CachedAnswer) or entry.stream != stream:
            return None
        try:
            parsed = None if stream or parse is None else parse(entry.body)
        except ModelCallError:
            return None
        rec.cached = True
        return Exchange(
            status=entry.status,
            body=entry.body,
            headers={},
            parsed=parsed,
            response=CachedResponse(entry.body) if stream else None,
        )

    def _cache_miss(self, session: GatewaySession, rec: CallRecord) -> ModelCallError:
        msg = (
            f"acx gateway: the {rec.role} role's cache is in replay mode and holds no answer to this "
            f"{rec.protocol} request (key {rec.cache_key}); run once with cache: write or read-write "
            "to record it"
        )
        session.cache_misses.append(f"{rec.role}: call {rec.seq}: no cached answer (key {rec.cache_key})")
        body = {"type": "error", "error": {"type": "cache_miss", "code": "cache_miss", "message": msg}}
        return ModelCallError("cache_miss", msg, status=404, body=json.dumps(body).encode())

    async def cache_store(self, session: GatewaySession, rec: CallRecord, body: bytes, *, stream: bool = False) -> None:
        """Stores an upstream answer under ``rec``'s key, scrubbed of the role's key (the relay's
        forms) and, by the store, of every secret of the run. A failed write never fails the call."""
        cache, key = self.cache, rec.cache_key
        if cache is None or key is None or rec.cached:
            return
        role = self.roles[rec.role]
        answer = CachedAnswer(key, rec.protocol, rec.model, stream, 200, self.keys.scrubber(role).scrub(body))
        try:
            with trio.CancelScope(shield=True):  # a write begun is finished (the temp file is not left)
                await trio.to_thread.run_sync(cache.put, answer)
        except OSError as exc:
            session.cache_errors.append(f"{rec.role}: call {rec.seq}: {type(exc).__name__}: {exc.strerror or exc}")

    # ---- acx run --replay ------------------------------------------------------------------------
    def _replayed(
        self, session: GatewaySession, rec: CallRecord, body: Any, parse: Callable[[bytes], Any] | None, stream: bool
    ) -> Exchange:
        """The recorded answer of the session's next recorded call, when ``body`` is that call's
        request; else a ``replay_diverged`` error (the first one also an issue of the attempt)."""
        cursor = session.replay
        assert cursor is not None and self.replay is not None
        if cursor.diverged is not None:
            raise _replay_error("replay_diverged", cursor.diverged)
        n = cursor.next
        if n >= len(cursor.calls):
            raise self._diverged(session, f"call {n + 1}: the replayed run made only {len(cursor.calls)} call(s)")
        recorded = cursor.calls[n]
        cursor.next += 1
        got = json.loads(json.dumps(rec._scrubbed(body)))
        if self.replay.scrub is not None:
            got = self.replay.scrub(got)
        want = {"role": recorded.get("role"), "protocol": recorded.get("protocol"), "request": recorded.get("request")}
        field_ = first_difference(want, {"role": rec.role, "protocol": rec.protocol, "request": got})
        if field_ is not None:
            raise self._diverged(session, f"call {n + 1} differs from the recorded one first at {field_}")
        error = recorded.get("error") or {}
        if error.get("kind") not in (None, "stream_cut"):
            # The recorded call failed: the agent gets the same failure again.
            raise _replay_error(error["kind"], str(error.get("message")), status=recorded.get("status"))
        answer = recorded.get("response")
        if not isinstance(answer, dict) or "acx_note" in answer:
            raise self._diverged(
                session, f"call {n + 1}: its answer was not kept in the recorded transcript (cut to the storage caps)"
            )
        data = render_stream(rec.protocol, answer, got) if stream else json.dumps(answer).encode()
        try:
            parsed = None if stream or parse is None else parse(data)
        except ModelCallError as exc:
            raise self._diverged(
                session, f"call {n + 1}: the recorded answer cannot be replayed ({exc.message})"
            ) from None
        rec.cached = True
        return Exchange(
            status=int(recorded.get("status") or 200),
            body=data,
            headers={},
            parsed=parsed,
            response=CachedResponse(data) if stream else None,
        )

    def _diverged(self, session: GatewaySession, why: str) -> ModelCallError:
        assert session.replay is not None and self.replay is not None
        message = f"acx run --replay {self.replay.source}: {why}; the agent diverged from the recorded run"
        session.replay.diverged = message
        session.replay_divergences.append(message)
        return _replay_error("replay_diverged", message)


class _HttpFront:
    """The gateway's HTTP endpoint for agents in sandboxes: the session's token checked, the
    request checked, then translated to the role's protocol or forwarded (a stream as it arrives)."""

    def __init__(
        self,
        roles: dict[str, Role],
        sessions: dict[str, tuple[GatewaySession, str]],
        ledger: _Ledger,
        keys: _RoleKeys,
        answers: _Answers,
        call_in_process: Callable[..., Awaitable[ModelResponse]],
    ) -> None:
        self.roles = roles
        #: Token → (session, role) of every open session.
        self.sessions = sessions
        self.ledger = ledger
        self.keys = keys
        self.answers = answers
        self.call_in_process = call_in_process

    async def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Reply:
        path = target.split("?", 1)[0]
        token = _token_of(headers)
        entry = self.sessions.get(token) if token else None
        if entry is None:
            why = "no acx session token" if not token else "unknown or expired session token (its session has ended)"
            return _error(401, "authentication_error", f"acx gateway: {why}")
        session, role_name = entry
        role = self.roles[role_name]
        if method == "GET" and path in ("/v1/models", "/models"):
            return (
                200,
                json.dumps({"object": "list", "data": [{"id": role.endpoint.model, "object": "model"}]}).encode(),
                [],
            )
        if headers.get("upgrade", "").lower() == "websocket":
            # Codex CLI opens the Responses API over a WebSocket first; 426 is the answer on which
            # it falls back to HTTPS at once (a 404 or 501 costs five reconnects with backoff).
            return _error(
                426,
                "upgrade_required",
                f"acx gateway: {path} is not served over WebSocket; POST it over HTTP(S) instead",
            )
        protocol = _PATHS.get(path)
        if method != "POST" or protocol is None:
            return _error(
                404,
                "not_found_error",
                f"acx gateway: no endpoint {method} {path}; use /v1/chat/completions, /v1/responses or /v1/messages",
            )
        try:
            incoming = loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            why = "is nested too deeply" if "nested" in str(exc) else "is not JSON"
            return _error(400, "invalid_request_error", f"acx gateway: the request body {why}")
        if not isinstance(incoming, dict):
            return _error(400, "invalid_request_error", "acx gateway: the request body is not a JSON object")
        ep = role.endpoint
        problem = request_problem(protocol, incoming, translated=protocol != ep.protocol)
        if problem is not None:
            return _error(400, "invalid_request_error", f"acx gateway: malformed {protocol} request: {problem}")
        if incoming.get("stream") and protocol != ep.protocol:
            return _error(
                400,
                "invalid_request_error",
                f"acx gateway: streaming across protocols is not supported: this run's {role_name} model "
                f"speaks {ep.protocol}; send stream: false, or call {_URLS[ep.protocol]}",
            )
        refusal = self.ledger.refusal(session, role)
        if refusal is not None:
            err = self.ledger.refuse(session, role, protocol, "http", refusal)
            return _error(400, "limit_exceeded", err.message)
        if protocol != ep.protocol:
            return await self._translate(session, role, protocol, incoming, len(body))
        return await self._forward(session, role, protocol, incoming, len(body))

    async def _translate(
        self, session: GatewaySession, role: Role, protocol: Protocol, incoming: dict[str, Any], size: int
    ) -> Reply:
        """An agent speaking another protocol than the role's: the request is normalised,
        re-built in the role's protocol, and the answer rendered back in the agent's."""
        ep = role.endpoint
        try:
            chat = normalize_request(protocol, incoming)
            params, bad = translatable_params(chat.params, ep.protocol)
            request = ChatRequest(messages=chat.messages, tools=chat.tools, params=params)
            build_call(ep, request)  # what the call will send: refused here, not mid-call
        except ModelCallError as exc:
            return _error(400, "invalid_request_error", f"acx gateway: {exc.message}")
        except (TypeError, AttributeError, KeyError, ValueError, IndexError, RecursionError) as exc:
            # request_problem checks the fields translation reads; this is the net under it.
            return _error(
                400,
                "invalid_request_error",
                f"acx gateway: the {protocol} request cannot be translated to {ep.protocol} "
                f"({type(exc).__name__}: {str(exc)[:120]}); check its messages/input and tools",
            )
        if bad:
            want = _URLS[ep.protocol]
            return _error(
                400,
                "invalid_request_error",
                f"acx gateway: this run's {role.name} model speaks {ep.protocol}; the {protocol} request's "
                f"parameter(s) {', '.join(bad)} cannot be translated: drop them, or call {want}",
            )
        try:
            resp = await self.call_in_process(session, role.name, request, via="http", request_bytes=size)
        except ModelCallError as exc:
            status = (
                exc.status if exc.status is not None and exc.status < 500 else (504 if exc.kind == "timeout" else 502)
            )
            kind = "limit_exceeded" if exc.kind == "limit_exceeded" else "api_error"
            return _error(400 if exc.kind == "limit_exceeded" else status, kind, f"acx gateway: {exc.message}")
        # resp is scrubbed (_call_in_process); the render adds nothing of the upstream's.
        return 200, json.dumps(render_response(protocol, resp, ep.model)).encode(), []

    async def _forward(
        self, session: GatewaySession, role: Role, protocol: Protocol, incoming: dict[str, Any], size: int
    ) -> Reply:
        ep = role.endpoint
        # The run decides the model; configured params fill in what the agent did not set.
        outgoing = {**ep.params, **incoming, "model": ep.model}
        if incoming.get("stream"):
            return await self._forward_stream(session, role, protocol, outgoing, size)
        rec = self.ledger.record(session, role, protocol, "http")
        rec.request = outgoing
        rec.secrets = self.keys.secrets(role)
        url, headers = self.keys.upstream(role, protocol)
        scrubber = self.keys.scrubber(role)

        def parse(data: bytes) -> tuple[bytes, ModelResponse]:
            # An answer that reflects the key is cut before anything reads it (M4): the agent,
            # the transcript and the trajectory all see the scrubbed body.
            data = scrubber.scrub(data)
            return data, parse_response(protocol, data)

        try:
            ex = await self.answers.exchange(session, rec, ep, url, outgoing, headers, parse=parse)
        except ModelCallError as exc:
            self.ledger.failed(session, rec, exc)
            if exc.body is not None and exc.status is not None:
                return (
                    exc.status,
                    self.keys.scrubber(role).scrub(exc.body),
                    [],
                )  # the server's own 4xx answer, passed through
            status = 504 if exc.kind == "timeout" else 502
            return _error(status, "api_error", f"acx gateway: {exc.message}")
        if ex is None:
            return _abandoned_reply(rec)
        rec.finished_at = time.time()
        body, resp = ex.parsed
        session.secrets_cut += scrubber.cut
        rec.attempts = ex.attempts
        rec.status = ex.status
        rec.response = resp.raw
        rec.normalized_response = resp
        keep_within_caps(rec, session, answer_bytes=len(body), request_bytes=size)
        self.ledger.account(session, role, rec, resp)
        return ex.status, body, []

    async def _forward_stream(
        self, session: GatewaySession, role: Role, protocol: Protocol, outgoing: dict[str, Any], size: int
    ) -> Reply:
        """A streamed call passed through as it arrives; the stream is folded into one response
        at its end for the transcript, usage and limits."""
        ep = role.endpoint
        if protocol == "openai-chat" and "stream_options" not in outgoing:
            outgoing["stream_options"] = {"include_usage": True}  # usage arrives in the last chunk
        rec = self.ledger.record(session, role, protocol, "http")
        rec.request = outgoing
        rec.secrets = self.keys.secrets(role)
        url, headers = self.keys.upstream(role, protocol)
        try:
            ex = await self.answers.exchange(session, rec, ep, url, outgoing, headers, stream=True)
        except ModelCallError as exc:
            self.ledger.failed(session, rec, exc)
            if exc.body is not None and exc.status is not None:
                return exc.status, self.keys.scrubber(role).scrub(exc.body), []
            return _error(504 if exc.kind == "timeout" else 502, "api_error", f"acx gateway: {exc.message}")
        if ex is None:
            return _abandoned_reply(rec)
        rec.attempts = ex.attempts
        rec.status = ex.status

        received = bytearray()
        scrubber = self.keys.scrubber(role)

        framer = _EventFramer()

        abandoned: list[str] = []

        async def relay() -> Any:
            pieces = chunks(ex).__aiter__()
            try:
                while True:
                    # Each wait for the upstream is cancelled when the session closes (a scope
                    # per wait: a yield inside a cancel scope would hand it to the consumer).
                    scope = trio.CancelScope()
                    session.in_flight.add(scope)
                    try:
                        with scope:
                            chunk = await pieces.__anext__()
                    except StopAsyncIteration:
                        break
                    except trio.Cancelled:
                        abandoned.append("the agent hung up (or the run stopped) while the answer streamed")
                        raise
                    finally:
                        session.in_flight.discard(scope)
                    if scope.cancelled_caught:
                        abandoned.append("its attempt ended while the answer streamed")
                        break
                    # Scrubbed across chunk boundaries (a key split over two chunks is held back
                    # until it is whole, then cut), passed on in whole events; the fold below
                    # reads what the agent got.
                    passed = framer.feed(scrubber.feed(chunk))
                    if passed:
                        received.extend(passed)
                        yield passed
                if abandoned:
                    pass  # nobody is left to read an error event
                elif ex.stream_error is None:
                    rest = framer.feed(scrubber.flush()) + framer.flush()
                    if rest:
                        received.extend(rest)
                        yield rest
                else:
                    # The answer was cut (the body limit, the upstream hanging up): its partial
                    # last event is dropped and the agent gets an error event in its protocol,
                    # never a 200 that merely ends (M4).
                    session.stream_cuts.append(f"{role.name}: {ex.stream_error}")
                    yield _stream_error_event(protocol, f"acx gateway: the model's answer was cut: {ex.stream_error}")
            finally:
                session.secrets_cut += scrubber.cut
                scrubber.cut = 0
                with trio.CancelScope(shield=True):  # the call is recorded however the relay ended
                    await out.finish_once()  # before the agent sees the end: its next call sees the usage

        def fold(data: bytes) -> tuple[ModelResponse, int]:
            return scrub_response(parse_stream(protocol, data), rec.secrets)

        async def finish() -> None:
            rec.finished_at = time.time()
            data = bytes(received)
            try:
                # A huge answer is folded in a worker thread: on the trio thread, folding 64 MiB
                # stalled every other attempt's calls for seconds (issue 24 item 3).
                resp, cut = fold(data) if len(data) < OFF_THREAD_BYTES else await trio.to_thread.run_sync(fold, data)
            except ModelCallError as exc:
                self.ledger.failed(session, rec, exc)
            else:
                session.secrets_cut += cut
                rec.response = resp.raw
                rec.normalized_response = resp
                keep_within_caps(rec, session, answer_bytes=len(data), request_bytes=size)
                self.ledger.account(session, role, rec, resp)
                if writes(self.answers.cache_mode(role.name)) and ex.stream_error is None and not abandoned:
                    await self.answers.cache_store(session, rec, data, stream=True)  # complete answers only
            if ex.stream_error is not None:  # what the call's record says first: it was cut
                rec.error = {"kind": "stream_cut", "message": ex.stream_error}
            if abandoned:
                _mark_abandoned(rec, abandoned[0])

        out = _Relay(relay(), ex, finish)
        return ex.status, out, []


def _mark_abandoned(rec: CallRecord, why: str) -> None:
    rec.finished_at = time.time()
    rec.error = {"kind": "cancelled", "message": f"acx gateway: the call was abandoned: {why}"}


class _Relay:
    """A streamed answer being passed to the agent. ``aclose`` (the server calls it whatever
    happened) closes the upstream response even when the agent hung up before the first chunk
    — an async generator never started would skip its clean-up and keep the connection and its
    ``max_connections`` slot — and then records and counts the call."""

    def __init__(self, gen: Any, ex: Any, finish: Callable[[], Awaitable[None]]) -> None:
        self._gen = gen
        self._ex = ex
        self._finish: Callable[[], Awaitable[None]] | None = finish

    def __aiter__(self) -> Any:
        return self._gen

    async def finish_once(self) -> None:
        finish, self._finish = self._finish, None
        if finish is not None:
            await finish()

    async def aclose(self) -> None:
        try:
            await self._gen.aclose()
        finally:
            with trio.CancelScope(shield=True):
                await self._ex.response.aclose()
                await self.finish_once()


class _EventFramer:
    """Server-sent events passed on whole: bytes up to the last event boundary (a blank line),
    the rest held until it completes — so a cut stream's partial event never reaches the agent."""

    def __init__(self) -> None:
        self._held = bytearray()

    def feed(self, data: bytes) -> bytes:
        if not data:
            return b""
        self._held += data
        lf, crlf = self._held.rfind(b"\n\n"), self._held.rfind(b"\r\n\r\n")
        end = max(lf + 2 if lf >= 0 else -1, crlf + 4 if crlf >= 0 else -1)
        if end < 0:
            return b""
        out = bytes(self._held[:end])
        del self._held[:end]
        return out

    def flush(self) -> bytes:
        out = bytes(self._held)
        self._held.clear()
        return out


def _stream_error_event(protocol: Protocol, message: str) -> bytes:
    """The server-sent event each protocol's clients raise on (an ``error`` event / chunk)."""
    event: dict[str, object]
    if protocol == "anthropic":
        event = {"type": "error", "error": {"type": "api_error", "message": message}}
        return b"event: error\ndata: " + json.dumps(event).encode() + b"\n\n"
    if protocol == "openai-responses":
        event = {"type": "error", "code": "stream_cut", "message": message, "param": None}
        return b"event: error\ndata: " + json.dumps(event).encode() + b"\n\n"
    chunk = {"error": {"message": message, "type": "server_error", "code": "stream_cut"}}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _replay_error(kind: str, message: str, *, status: int | None = None) -> ModelCallError:
    """A replayed call's error, with the body an agent's SDK reads (a 4xx SDKs do not retry)."""
    status = status if isinstance(status, int) and status >= 400 else (404 if kind == "cache_miss" else 400)
    body = {"type": "error", "error": {"type": kind, "code": kind, "message": message}}
    return ModelCallError(kind, message, status=status, body=json.dumps(body).encode())  # type: ignore[arg-type]


def _new_token() -> str:
    import secrets

    return TOKEN_PREFIX + secrets.token_urlsafe(24)


_URLS = {
    "openai-chat": "$OPENAI_BASE_URL/chat/completions",
    "openai-responses": "$OPENAI_BASE_URL/responses",
    "anthropic": "$ANTHROPIC_BASE_URL/v1/messages",
}


def _token_of(headers: dict[str, str]) -> str | None:
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    key = headers.get("x-api-key")
    return key or None


def _abandoned_reply(rec: CallRecord) -> Reply:
    # The session is closed: no agent is left to read this, but the server must answer something.
    message = rec.error["message"] if rec.error else "acx gateway: the call was abandoned"
    return _error(503, "api_error", message)


def _error(status: int, kind: str, message: str) -> Reply:
    # One shape both SDK families read: OpenAI's {"error": {...}} plus Anthropic's type field.
    body = {"type": "error", "error": {"type": kind, "code": kind, "message": message}}
    return status, json.dumps(body).encode(), []
