"""The driver ⇄ worker message protocol (versioned msgspec structs, MessagePack on the wire).

What travels is IR and driver-API data only: the environment (driver id + provider params, as
compiled into the plan), :class:`acx.drivers.OpenRequest`, argv/env/paths of one session
operation, and the reply. No interpreter object crosses a node boundary, so a worker never needs
the run's components, store or secrets beyond what one operation carries.

Every call carries a deterministic key (``<session id>/<sequence>``; the session id is the
interpreter's, itself derived from the run and attempt). The driver keeps the first reply per key;
any later one (a reply that arrives after the call was given up: node lost, cancelled) is discarded
and counted, never applied.
"""

from __future__ import annotations

from typing import Any

import msgspec

from acx.drivers import ExecResult, OpenRequest, SessionRecord
from acx.ir import NetworkPolicy

__all__ = [
    "PROTOCOL_VERSION",
    "Call",
    "DriverRef",
    "ErrorInfo",
    "Op",
    "ProtocolError",
    "Reply",
    "decode_call",
    "decode_reply",
    "encode",
]

#: Bumped on any incompatible change; a worker refuses a call of another version (clear error).
#: 2: ``MissingImages`` (node labels: the images a node's provider lacks).
PROTOCOL_VERSION = 2


class ProtocolError(Exception):
    """A message that is not a call or reply of this protocol version."""


class DriverRef(msgspec.Struct, frozen=True, kw_only=True):
    """Which provider a worker opens sandboxes with: the plan's environment id and params."""

    env_id: str
    params: dict[str, Any] = {}


# ---- operations (one per driver/session hook) -----------------------------------------------------


class Hello(msgspec.Struct, frozen=True, kw_only=True, tag="hello"):
    """Prepare the provider on the worker's node (``Driver.prepare``); returns its notes."""


class MissingImages(msgspec.Struct, frozen=True, kw_only=True, tag="missing_images"):
    """Which of ``images`` the node's provider cannot give a sandbox (``Driver.missing_images``)."""

    images: list[str]


class Open(msgspec.Struct, frozen=True, kw_only=True, tag="open"):
    request: OpenRequest


class Exec(msgspec.Struct, frozen=True, kw_only=True, tag="exec"):
    argv: list[str]
    cwd: str | None
    env: dict[str, str]
    timeout: float | None
    stdin: bytes | None
    max_output_bytes: int
    #: The user of the caller's ``Session.user_scope`` (None: the sandbox's default).
    user: str | None = None


class WriteBytes(msgspec.Struct, frozen=True, kw_only=True, tag="write_bytes"):
    path: str
    data: bytes
    mode: int


class ReadBytes(msgspec.Struct, frozen=True, kw_only=True, tag="read_bytes"):
    path: str
    max_bytes: int | None


class IsFile(msgspec.Struct, frozen=True, kw_only=True, tag="is_file"):
    path: str


class IsDir(msgspec.Struct, frozen=True, kw_only=True, tag="is_dir"):
    path: str


class UploadDir(msgspec.Struct, frozen=True, kw_only=True, tag="upload_dir"):
    """A host directory travels as a tar archive (the worker's node does not see the driver's disk)."""

    tar: bytes
    remote_dir: str


class DownloadDir(msgspec.Struct, frozen=True, kw_only=True, tag="download_dir"):
    remote_dir: str


class SetPolicy(msgspec.Struct, frozen=True, kw_only=True, tag="set_network_policy"):
    policy: NetworkPolicy


class Endpoint(msgspec.Struct, frozen=True, kw_only=True, tag="endpoint"):
    port: int


class KillStray(msgspec.Struct, frozen=True, kw_only=True, tag="kill_stray_processes"):
    pass


class Close(msgspec.Struct, frozen=True, kw_only=True, tag="close"):
    pass


class ListSessions(msgspec.Struct, frozen=True, kw_only=True, tag="list_sessions"):
    labels: dict[str, str] | None


class CloseSession(msgspec.Struct, frozen=True, kw_only=True, tag="close_session"):
    session_id: str


class EndRun(msgspec.Struct, frozen=True, kw_only=True, tag="end_run"):
    session_prefix: str
    keep: list[str] = []


class Cancel(msgspec.Struct, frozen=True, kw_only=True, tag="cancel"):
    """Cancel the in-flight call ``target`` (its command is killed in the sandbox)."""

    target: str


Op = (
    Hello
    | MissingImages
    | Open
    | Exec
    | WriteBytes
    | ReadBytes
    | IsFile
    | IsDir
    | UploadDir
    | DownloadDir
    | SetPolicy
    | Endpoint
    | KillStray
    | Close
    | ListSessions
    | CloseSession
    | EndRun
    | Cancel
)


class Call(msgspec.Struct, frozen=True, kw_only=True):
    v: int = PROTOCOL_VERSION
    key: str
    driver: DriverRef
    session_id: str | None = None
    op: Op
    #: Sent again after the transport could not tell whether it ran (Ray's "temporarily
    #: unavailable"): the worker answers with the first run's reply if it has one (or waits for
    #: it), and runs it only if it never saw the key.
    resent: bool = False


class ErrorInfo(msgspec.Struct, frozen=True, kw_only=True):
    #: ``file_not_found`` | ``driver`` | ``capability`` | ``user`` | ``value`` | ``other``
    kind: str
    message: str
    code: str | None = None
    help: str | None = None


class OpenInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What the driver side mirrors of a session opened on a worker."""

    workdir: str | None
    public_env: dict[str, str] = {}
    open_notes: list[str] = []
    supports_limited_download: bool = False


#: What a reply's ``value`` holds, per operation (decoded with this type on the driver side).
Value = ExecResult | OpenInfo | list[SessionRecord] | list[str] | bytes | bool | str | None


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    v: int = PROTOCOL_VERSION
    key: str
    node: str
    value: Any = None
    error: ErrorInfo | None = None


_ENC = msgspec.msgpack.Encoder()
_CALL = msgspec.msgpack.Decoder(Call)
_REPLY = msgspec.msgpack.Decoder(Reply)


def encode(msg: Call | Reply) -> bytes:
    return _ENC.encode(msg)


def _check_version(data: bytes, v: int) -> None:
    if v != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol version {v} is not this acx's {PROTOCOL_VERSION}: install the same acx version on every node"
        )


def decode_call(data: bytes) -> Call:
    try:
        call = _CALL.decode(data)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"not an acx cluster call: {exc}") from None
    _check_version(data, call.v)
    return call


def resent(data: bytes) -> bytes:
    """The encoded call ``data``, marked as sent again (see :attr:`Call.resent`)."""
    return encode(msgspec.structs.replace(decode_call(data), resent=True))


def decode_reply(data: bytes) -> Reply:
    try:
        reply = _REPLY.decode(data)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"not an acx cluster reply: {exc}") from None
    _check_version(data, reply.v)
    return reply


def convert_value(value: Any, type_: Any) -> Any:
    """A reply value as the operation's type (msgpack carries builtins)."""
    return msgspec.convert(value, type_)
