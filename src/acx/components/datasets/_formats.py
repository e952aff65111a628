"""Streaming readers: a dataset file → ``(locator, record)`` pairs, one row at a time.

``locator`` says where the row is, for error messages: ``Span(file, line, 1)`` for JSONL and
CSV/TSV, and a ``file[index]`` / ``file row N`` path for JSON arrays and Parquet (which have no
useful line). Rows are read lazily, so a 1 M-row JSONL file is never held in memory; only a JSON
array is parsed whole (JSON has no row boundaries).
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec

from acx.diagnostics import Span
from acx.errors import AcxPlanError
from acx.inputs import MAX_DATASET_BYTES, MAX_DATASET_ROWS

__all__ = [
    "Locator",
    "decode_batch",
    "detect_format",
    "is_gzip",
    "iter_records",
    "jsonl_batches",
    "jsonl_lines",
    "row_limit",
]

_DECODER = msgspec.json.Decoder()
_LIST_DECODER = msgspec.json.Decoder(list[Any])
_SUFFIXES = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".arrow": "arrow",
}


@dataclass(frozen=True, slots=True)
class Locator:
    """Where a row is: a line (JSONL, CSV) or a record index (JSON, Parquet), 1-based."""

    file: str
    line: int | None = None
    record: int | None = None
    kind: str = "row"

    def where(self) -> str:
        return f"line {self.line}" if self.line is not None else f"{self.kind} {self.record}"

    def span(self) -> Span | None:
        return Span(self.file, self.line, 1) if self.line is not None else None

    def error(self, message: str, help: str, code: str = "E0402", field: str | None = None) -> AcxPlanError:
        where = f"{self.file}: {self.where()}" + (f", field `{field}`" if field else "")
        span = self.span()
        return AcxPlanError(
            f"{message} ({where})" if span is None else message,
            code=code,
            span=span,
            path=None if span is not None else where,
            help=help,
        )


_GZIP_MAGIC = b"\x1f\x8b"
_ENCODER = msgspec.json.Encoder(enc_hook=str)


def is_gzip(path: Path) -> bool:
    """A gzip-compressed file (by its magic bytes: ``HumanEval.jsonl.gz``, or a misnamed one)."""
    try:
        with path.open("rb") as fh:
            return fh.read(2) == _GZIP_MAGIC
    except OSError:
        return False


def detect_format(path: Path, declared: str) -> str:
    if declared != "auto":
        return declared
    if path.is_dir():  # a Hugging Face save_to_disk folder (resolve_dataset_path checked state.json)
        return "arrow"
    # data.jsonl.gz: the format of what is inside (the file is decompressed as it is read)
    suffix = path.with_suffix("").suffix if path.suffix.lower() == ".gz" else path.suffix
    fmt = _SUFFIXES.get(suffix.lower())
    if fmt is None:
        raise AcxPlanError(
            f"cannot tell the format of dataset {path} from its suffix `{suffix}`",
            code="E0407",
            path="benchmark.params.format",
            help="set `format` to jsonl, json, csv, tsv, parquet or arrow",
        )
    if fmt == "json" and _starts_with_object(path):
        return "jsonl"  # Hugging Face `to_json` writes JSON Lines into a `.json` file
    return fmt


def _starts_with_object(path: Path) -> bool:
    with _open_bytes(path) as fh:
        head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"{")


def too_large(path: Path, what: str) -> AcxPlanError:
    return AcxPlanError(
        f"dataset {path} {what}",
        code="E0219",
        path="benchmark.params.path",
        help=f"datasets are read up to {MAX_DATASET_BYTES // 2**20} MiB (the file, and again what it decodes "
        f"to) and {MAX_DATASET_ROWS:,} rows (docs/errors.md#E0219): split it into several datasets, or "
        "keep the rows you evaluate",
    )


class _Bounded(io.RawIOBase):
    """A binary stream that fails once more than ``MAX_DATASET_BYTES`` came out of ``inner``
    (a gzip stream: a few KB can decompress to gigabytes)."""

    def __init__(self, inner: Any, path: Path) -> None:
        self._inner, self._path, self._total = inner, path, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            data = self._inner.read(len(buffer))
        except (OSError, EOFError, zlib.error) as exc:
            raise AcxPlanError(
                f"dataset {self._path} is not a readable gzip file: {exc}",
                code="E0402",
                path="benchmark.params.path",
                help="check the download (gzip -t FILE), or decompress it yourself",
            ) from None
        self._total += len(data)
        if self._total > MAX_DATASET_BYTES:
            raise too_large(self._path, f"decompresses to more than {MAX_DATASET_BYTES // 2**20} MiB")
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._inner.close()
        super().close()


def _open_bytes(path: Path) -> IO[bytes]:
    """The dataset's bytes, decompressed when it is gzip; the file's own size checked first."""
    size = os.stat(path).st_size
    if size > MAX_DATASET_BYTES:
        raise too_large(path, f"is {size / 2**20:.1f} MiB, above the limit of {MAX_DATASET_BYTES // 2**20} MiB")
    if not is_gzip(path):
        return path.open("rb")
    return io.BufferedReader(_Bounded(gzip.GzipFile(path, "rb"), path), 1 << 16)


def _sized(path: Path) -> None:
    """A Parquet/Arrow file or save_to_disk folder within the byte limit (before pyarrow opens it)."""
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    total = sum(p.stat().st_size for p in files)
    if total > MAX_DATASET_BYTES:
        raise too_large(path, f"is {total / 2**20:.1f} MiB, above the limit of {MAX_DATASET_BYTES // 2**20} MiB")
    if any(is_gzip(p) for p in files if p.suffix != ".json"):
        raise AcxPlanError(
            f"dataset {path} is gzip-compressed Parquet/Arrow, which acx does not read",
            code="E0407",
            path="benchmark.params.path",
            help="decompress it (gunzip); Parquet compresses its pages itself",
        )


def iter_records(path: Path, fmt: str) -> Iterator[tuple[Locator, Any]]:
    """Every row of the file with its locator (records not yet checked to be objects), within
    the dataset limits: bytes read, bytes decoded, rows (E0219)."""
    measured = fmt in ("parquet", "arrow")  # columnar: a few MB of file can decode to gigabytes
    if measured:
        _sized(path)
    return _bounded(_records(path, fmt), path, measured)


def row_limit() -> int:
    """The most rows a dataset may have (E0219), read when called."""
    return MAX_DATASET_ROWS


def _bounded(rows: Iterator[tuple[Locator, Any]], path: Path, measured: bool) -> Iterator[tuple[Locator, Any]]:
    decoded = 0
    for count, (loc, record) in enumerate(rows, start=1):
        if count > MAX_DATASET_ROWS:
            raise too_large(path, f"has more than {MAX_DATASET_ROWS:,} rows")
        if measured:
            decoded += len(_ENCODER.encode(record))
            if decoded > MAX_DATASET_BYTES:
                raise too_large(path, f"decodes to more than {MAX_DATASET_BYTES // 2**20} MiB of records")
        yield loc, record


def _records(path: Path, fmt: str) -> Iterator[tuple[Locator, Any]]:
    if fmt == "jsonl":
        return _jsonl(path)
    if fmt == "json":
        return _json(path)
    if fmt in ("csv", "tsv"):
        return _csv(path, "\t" if fmt == "tsv" else ",")
    if fmt == "parquet":
        from acx.components.datasets._parquet import iter_parquet

        return iter_parquet(path)
    if fmt == "arrow":
        from acx.components.datasets._parquet import iter_arrow

        return iter_arrow(path)
    raise AcxPlanError(
        f"unknown dataset format {fmt!r}",
        code="E0407",
        path="benchmark.params.format",
        help="use jsonl, json, csv, tsv or parquet",
    )


_BATCH_BYTES = 1 << 22  # JSONL is decoded 4 MiB of whole lines at a time: one C call, bounded memory


def _jsonl(path: Path) -> Iterator[tuple[Locator, Any]]:
    name = str(path)
    for first, chunk in jsonl_batches(path):
        records = decode_batch(chunk, _LIST_DECODER)
        if records is None:
            yield from jsonl_lines(name, first, chunk)
        else:
            for line, record in enumerate(records, start=first):
                yield Locator(name, line=line), record


def jsonl_batches(path: Path) -> Iterator[tuple[int, bytes]]:
    """The file as ``(first line number, bytes of whole lines)`` chunks."""
    with _open_bytes(path) as fh:
        line, rest = 1, b""
        while True:
            block = fh.read(_BATCH_BYTES)
            if not block:
                if rest:
                    yield line, rest
                return
            block = rest + block if rest else block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                rest = block
                continue
            chunk, rest = block[:cut], block[cut:]
            yield line, chunk
            line += chunk.count(b"\n")


def decode_batch(chunk: bytes, decoder: msgspec.json.Decoder[list[Any]]) -> list[Any] | None:
    """Every line of ``chunk`` decoded in one call, as the elements of a JSON array (a JSON string
    cannot hold a raw newline, so each newline sits between two values); None when the chunk
    needs the line-by-line reader: a blank line, a line that is not exactly one JSON value (the
    element count then differs), or a record the typed ``decoder`` refuses."""
    body = chunk[:-1] if chunk.endswith(b"\n") else chunk
    try:
        records = decoder.decode(b"[" + body.replace(b"\n", b",") + b"]")
    except msgspec.DecodeError:  # ValidationError too
        return None
    return records if len(records) == body.count(b"\n") + 1 else None


def jsonl_lines(name: str, first: int, chunk: bytes) -> Iterator[tuple[Locator, Any]]:
    """``chunk`` line by line: blank lines skipped, a bad line reported with its number."""
    for lineno, raw in enumerate(io.BytesIO(chunk), start=first):  # lines keep their newline, as read
        if not raw.strip():
            continue
        loc = Locator(name, line=lineno)
        try:
            yield loc, _DECODER.decode(raw)
        except msgspec.DecodeError as exc:
            raise loc.error(f"line {lineno} is not valid JSON: {exc}", "each line must be one JSON object") from None


def _json(path: Path) -> Iterator[tuple[Locator, Any]]:
    name = str(path)
    with _open_bytes(path) as fh:
        raw = fh.read()
    try:
        data = _DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        raise AcxPlanError(
            f"dataset {path} is not valid JSON: {exc}",
            code="E0402",
            path=name,
            help="a .json dataset is one JSON array of objects (or JSON Lines: one object per line)",
        ) from None
    if not isinstance(data, list):
        raise AcxPlanError(
            f"dataset {path} is a JSON {type(data).__name__}, not an array of records",
            code="E0402",
            path=name,
            help="write [{...}, {...}], or one object per line (JSON Lines)",
        )
    for index, record in enumerate(data, start=1):
        yield Locator(name, record=index, kind="record"), record


def _csv(path: Path, delimiter: str) -> Iterator[tuple[Locator, Any]]:
    name = str(path)
    csv.field_size_limit(MAX_DATASET_BYTES)
    with io.TextIOWrapper(_open_bytes(path), encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        try:
            header = next(reader)
        except StopIteration:
            return
        except (csv.Error, UnicodeDecodeError) as exc:
            raise Locator(name, line=1).error(
                f"cannot read the header: {exc}", "the first line names the columns"
            ) from None
        _check_header(header, Locator(name, line=1))
        width = len(header)
        start = reader.line_num + 1
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except (csv.Error, UnicodeDecodeError) as exc:
                raise Locator(name, line=start).error(
                    f"malformed row: {exc}", "check the quoting of this row"
                ) from None
            loc = Locator(name, line=start)
            start = reader.line_num + 1
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != width:
                raise loc.error(
                    f"row has {len(row)} cells but the header has {width} columns",
                    "every row needs one cell per header column (quote cells that contain the delimiter)",
                )
            yield loc, dict(zip(header, row, strict=True))


def _check_header(header: list[str], loc: Locator) -> None:
    seen: set[str] = set()
    for col in header:
        if not col.strip():
            raise loc.error("the header has an empty column name", "name every column in the first line")
        if col in seen:
            raise loc.error(f"the header names column `{col}` twice", "column names must be unique")
        seen.add(col)
