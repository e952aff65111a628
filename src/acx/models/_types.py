"""Value types of the model layer: endpoints, requests, responses, usage, errors, call records.

Messages and tools are in the OpenAI chat shape (the lingua franca of the anchors); the protocol
adapters translate them to the Anthropic and Responses shapes and normalise every answer back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "PROTOCOLS",
    "ChatRequest",
    "Endpoint",
    "ModelCallError",
    "ModelResponse",
    "Protocol",
    "ToolCall",
    "Usage",
]

Protocol = Literal["openai-chat", "openai-responses", "anthropic"]
PROTOCOLS: tuple[Protocol, ...] = ("openai-chat", "openai-responses", "anthropic")


@dataclass(frozen=True)
class Endpoint:
    """Where and how one model is reached. ``api_key`` is the resolved secret: it lives only in
    memory, is sent only in the auth header and never appears in ``repr`` or a record."""

    base_url: str
    model: str
    protocol: Protocol = "openai-chat"
    api_key: str | None = field(default=None, repr=False)
    params: dict[str, Any] = field(default_factory=dict)
    connect_timeout: float = 10.0
    #: Longest silence while waiting for the answer (httpx's 5 s default is wrong for LLMs).
    read_timeout: float = 600.0
    #: Bound on one call including retries and their waits.
    total_timeout: float | None = 1800.0
    max_retries: int = 3
    max_connections: int = 8
    #: Anthropic API version header.
    anthropic_version: str = "2023-06-01"
    #: ``model.wrap_api_key``: the key is sent wrapped with this session id (the run directory)
    #: for a usage-tracking gateway (AgentCompass ``utils/api_key.py``); ``None`` sends it as is.
    wrap_session_id: str | None = None

    def credential(self) -> str | None:
        """The value sent as the API key (wrapped when ``wrap_session_id`` is set)."""
        if self.api_key is None or self.wrap_session_id is None:
            return self.api_key
        import base64

        raw = f"<api_secret>{self.api_key}</api_secret><session_id>{self.wrap_session_id}</session_id>"
        return base64.b64encode(raw.encode()).decode()


@dataclass(frozen=True)
class ChatRequest:
    """A model call in the OpenAI chat shape; ``params`` are sent verbatim (over the endpoint's)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Usage:
    """Token counts of one call. ``prompt_tokens`` includes cached ones (as OpenAI reports)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    #: Parsed arguments; ``None`` when the model sent arguments that are not a JSON object.
    arguments: dict[str, Any] | None
    #: The arguments as a JSON string (what goes back to the server in the history).
    raw_arguments: str


@dataclass(frozen=True)
class ModelResponse:
    """One normalised answer, whatever the protocol and server dialect."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None
    #: Where the reasoning came from (``reasoning_content``, ``reasoning``, ``thinking``, ...).
    reasoning_key: str | None = None
    finish_reason: str | None = None
    #: ``None`` when the server reported no usage (never guessed).
    usage: Usage | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    def assistant_message(self, *, keep_reasoning: bool = False) -> dict[str, Any]:
        """The assistant turn to append to an OpenAI-chat history (arguments as strings)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": t.id, "type": "function", "function": {"name": t.name, "arguments": t.raw_arguments}}
                for t in self.tool_calls
            ]
        if keep_reasoning and self.reasoning is not None:
            msg[self.reasoning_key or "reasoning_content"] = self.reasoning
        return msg


ErrorKind = Literal[
    "rate_limited",  # 429 after retries
    "server_error",  # 5xx after retries
    "connection",  # could not connect / connection dropped, after retries
    "timeout",  # read or total deadline
    "malformed_response",  # 200 with a body that is not the protocol's shape, after retries
    "bad_request",  # 400/404/422...: never retried
    "auth",  # 401/403: never retried
    "context_length",  # the prompt does not fit: never retried
    "limit_exceeded",  # an acx limit refused the call
    "refused",  # the gateway refused the call (closed session, unsupported request)
    "cancelled",  # abandoned in flight: its session closed or its client hung up
    "cache_miss",  # a role in cache mode replay: no cached answer to the request
    "replay_diverged",  # acx run --replay: the call differs from the replayed run's
]


class ModelCallError(Exception):
    """A model call that failed for good. The message is safe to show (no key, no headers)."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status: int | None = None,
        attempts: int = 1,
        retry_after: float | None = None,
        body: bytes | None = None,
    ) -> None:
        super().__init__(message)
        #: The server's error body for a non-retried 4xx (the gateway relays it to the agent).
        self.body = body
        #: Every HTTP attempt of the call (``acx.models.AttemptRecord``), for transcripts.
        self.records: list[object] = []
        self.kind = kind
        self.message = message
        self.status = status
        self.attempts = attempts
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.kind in ("rate_limited", "server_error", "connection", "malformed_response")

    def __repr__(self) -> str:
        return f"ModelCallError({self.kind!r}, {self.message!r}, status={self.status})"
