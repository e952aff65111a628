"""Input limits, and reading the files acx is given without ever hanging on one.

Every document acx reads (spec, config, import, dataset, Harbor task file) goes through
:func:`read_regular_file`: it opens the path without blocking (a FIFO does not hang the open),
refuses anything that is not a regular file (a directory, FIFO, socket, device — also through a
symlink such as one to ``/dev/zero``) *before* reading a byte, and refuses files above the size
limit before reading them. The limits below bound the work one input can cause; they are
documented in docs/language.md, docs/configuration.md and docs/errors.md (E0218, E0219), and each
front end reports the limit it hit at the place that hit it.

This module is a leaf (stdlib only), like :mod:`acx.diagnostics`: the grammar, the compiler and
the components use it. Its exceptions carry no acx error type; each caller turns them into its
own located diagnostic.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from acx.diagnostics import Span
    from acx.errors import AcxUserError

_E = TypeVar("_E", bound="AcxUserError")

__all__ = [
    "MAX_ACX_BYTES",
    "MAX_DATASET_BYTES",
    "MAX_DATASET_ROWS",
    "MAX_DOCUMENT_BYTES",
    "MAX_EXPANDED_NODES",
    "MAX_INT_DIGITS",
    "MAX_LOOP_ITERATIONS",
    "MAX_NESTING_DEPTH",
    "MAX_STRING_CHARS",
    "MAX_TASK_FILE_BYTES",
    "FileTooLarge",
    "InputFileError",
    "NotRegularFile",
    "data_limit_problem",
    "file_kind",
    "input_file_error",
    "read_regular_file",
]

#: Largest YAML/JSON spec or config file read: the pure-Python YAML parser needs several
#: seconds of CPU per MiB, so the size bounds the parse (a 1,000-request orchestration is ~200 KiB).
MAX_DOCUMENT_BYTES = 256 * 2**10
#: Largest .acx file read (hand-written specs; parsing is the cost a file can cause).
MAX_ACX_BYTES = 256 * 2**10
#: Largest Harbor task file read (``task.toml``, ``instruction.md``).
MAX_TASK_FILE_BYTES = 4 * 2**20
#: Largest dataset read: the file's bytes, and again what it decodes to (a ``.gz`` file's
#: decompressed bytes; a Parquet/Arrow file's rows, measured as JSON).
MAX_DATASET_BYTES = 256 * 2**20
#: Most rows one dataset may have (a dictionary-encoded Parquet file of a few MB can hold millions).
MAX_DATASET_ROWS = 1_000_000
#: Deepest nesting of lists, mappings and blocks in any document (YAML, JSON, TOML, .acx).
MAX_NESTING_DEPTH = 100
#: Most values one document may expand to: YAML aliases and merge keys, .acx lets and loops.
MAX_EXPANDED_NODES = 100_000
#: Longest string an .acx document may build by interpolation.
MAX_STRING_CHARS = 1_048_576
#: Most iterations all ``for`` loops of one .acx document may run together.
MAX_LOOP_ITERATIONS = 10_000
#: Most digits of an integer literal (Python refuses to convert more than 4,300).
MAX_INT_DIGITS = 100


class InputFileError(Exception):
    """A file acx was given cannot be read as an input (see the subclasses)."""


class NotRegularFile(InputFileError):
    """The path is a directory, FIFO, socket or device; ``kind`` says which."""

    def __init__(self, path: str, kind: str) -> None:
        self.path = path
        self.kind = kind
        super().__init__(f"{path} is {kind}, not a regular file")


class FileTooLarge(InputFileError):
    def __init__(self, path: str, size: int, limit: int) -> None:
        self.path = path
        self.size = size
        self.limit = limit
        super().__init__(f"{path} is {_mib(size)}, above the limit of {_mib(limit)}")


def _mib(n: int) -> str:
    if n >= 2**20:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 2**10:.0f} KiB" if n >= 2**10 else f"{n} bytes"


def file_kind(mode: int) -> str:
    """A phrase for a non-regular file type ('a directory', 'a FIFO (named pipe)', ...)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def read_regular_file(path: str | os.PathLike[str], *, max_bytes: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of the regular file at ``path``.

    Raises :class:`NotRegularFile` or :class:`FileTooLarge` before reading anything, and the
    ``OSError`` of the open otherwise (``FileNotFoundError``, ``PermissionError``, ...)."""
    name = os.fspath(path)
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(name, file_kind(st.st_mode))
        if st.st_size > max_bytes:
            raise FileTooLarge(name, st.st_size, max_bytes)
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        total = 0
        while True:
            # Read one byte past the limit: a file that grew since fstat is still caught.
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise FileTooLarge(name, total, max_bytes)
        return b"".join(chunks)
    finally:
        os.close(fd)


def input_file_error(
    cls: type[_E],
    exc: Exception,
    *,
    span: Span | None = None,
    path: str | None = None,
    what: str = "",
) -> _E:
    """The located error for an :class:`acx.inputs.InputFileError`: E0218 for a path that is not
    a regular file (directory, FIFO, socket, device), E0219 for a file above the size limit.
    ``what`` names the file's role ("exact_match dataset "); ``path`` defaults to the file."""
    name = getattr(exc, "path", None) or path or ""
    if isinstance(exc, NotRegularFile):
        return cls(
            f"{what}{name} is {exc.kind}, not a regular file",
            code="E0218",
            span=span,
            path=path or name,
            help="name a regular file; acx never reads directories, FIFOs, sockets or devices as input",
        )
    if isinstance(exc, FileTooLarge):
        return cls(
            f"{what}{exc}",
            code="E0219",
            span=span,
            path=path or name,
            help="input files have a size limit (docs/errors.md#E0219); split the file or shorten it",
        )
    return cls(f"cannot read {what}{name}: {exc}", code=cls.default_code, span=span, path=path or name)


def data_limit_problem(value: object) -> str | None:
    """What in already-decoded data breaks an input limit (nesting deeper than
    MAX_NESTING_DEPTH, an integer of more than MAX_INT_DIGITS digits), or None. Iterative."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_NESTING_DEPTH:
            return f"lists and objects nest more than {MAX_NESTING_DEPTH} levels deep"
        if isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > 3.33 * MAX_INT_DIGITS:
            return f"an integer of more than {MAX_INT_DIGITS} digits"
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return None
