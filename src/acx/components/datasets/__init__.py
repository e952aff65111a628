"""Dataset files → tasks: streaming readers (JSONL, JSON, CSV/TSV, Parquet), a typed field
mapping, stable ids, deterministic selection (filters, ``sample_ids``, seeded shuffle, ``limit``)
and multiple-choice helpers. Used by the ``dataset`` benchmark and its presets.

Loading is two streaming passes: the first checks every row (a bad row is an error naming file,
line or row and field) and keeps only ids; the second builds :class:`~acx.ir.TaskSpec` objects
for the selected rows. Memory therefore grows with the ids and the selection, not the file.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import random
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec

from acx.components._configs import DatasetConfig
from acx.components.datasets._choices import (
    DEFAULT_MC_TEMPLATE,
    choice_order,
    letters_for,
    render_choices,
    target_letters,
)
from acx.components.datasets._formats import (
    Locator,
    decode_batch,
    detect_format,
    iter_records,
    jsonl_batches,
    jsonl_lines,
    row_limit,
    too_large,
)
from acx.components.datasets._mapping import MappedRow, _fast, choice_index, content_id, map_record
from acx.diagnostics import did_you_mean
from acx.errors import AcxPlanError
from acx.ir import TaskSpec

__all__ = [
    "DEFAULT_MC_TEMPLATE",
    "choice_index",
    "choice_order",
    "detect_format",
    "letters_for",
    "load_dataset",
    "render_choices",
    "resolve_dataset_path",
    "target_letters",
]


_KNOWN_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".tsv", ".tab", ".parquet", ".pq", ".arrow")


def resolve_dataset_path(path: str, base_dir: Path, *, missing_help: str | None = None) -> Path:
    """The dataset file: ``path`` (relative to ``base_dir``), or in a directory its one data file
    (or its ``metadata.jsonl``, the Hugging Face layout of records beside attachments)."""
    p = Path(path).expanduser()
    p = p if p.is_absolute() else base_dir / p
    try:
        if p.is_file():
            return p
        if p.is_dir():
            return _only_data_file(p)
    except (ValueError, OSError):
        pass
    secret = "${" in path
    raise AcxPlanError(
        f"dataset {p} does not exist",
        code="E0401",
        path="benchmark.params.path",
        help="the path is a secret reference, which only `acx run` resolves (compiling never reads secrets)"
        if secret
        else missing_help or "`path` is resolved relative to the spec file's directory; check it",
    )


def _only_data_file(directory: Path) -> Path:
    if (directory / "state.json").is_file() and any(directory.glob("*.arrow")):
        return directory  # a Hugging Face save_to_disk folder: its shards are read in order
    found = sorted(f for f in directory.iterdir() if f.is_file() and f.suffix.lower() in _KNOWN_SUFFIXES)
    if len(found) == 1:
        return found[0]
    # Hugging Face's convention for a folder of records plus attachments (GAIA): metadata.jsonl.
    if (directory / "metadata.jsonl").is_file():
        return directory / "metadata.jsonl"
    listing = ", ".join(f.name for f in found[:6]) or "none"
    raise AcxPlanError(
        f"dataset directory {directory} holds {len(found)} data files ({listing}); acx needs exactly one",
        code="E0401",
        path="benchmark.params.path",
        help="set `path` to the file to evaluate",
    )


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


class _Filters:
    """``filters``: column → value or list of values; null (or "") matches a missing value."""

    def __init__(self, filters: Mapping[str, Any] | None) -> None:
        self.wanted = {k: {_text(x) for x in (v if isinstance(v, list) else [v])} for k, v in (filters or {}).items()}
        self.columns_seen: set[str] = set()

    def keep(self, record: dict[str, Any]) -> bool:
        for column, wanted in self.wanted.items():
            if column in record:
                self.columns_seen.add(column)
            if _text(record.get(column)) not in wanted:
                return False
        return True

    def check(self, total: int, *, lenient: bool = False) -> None:
        unknown = [c for c in self.wanted if c not in self.columns_seen]
        if unknown and total and not lenient:
            raise AcxPlanError(
                f"filter column `{unknown[0]}` is in no row of the dataset",
                code="E0407",
                path=f"benchmark.params.filters.{unknown[0]}",
                help="filters name dataset columns; check the spelling",
            )


Transform = Callable[[dict[str, Any], Locator], dict[str, Any]]


def _rows(path: Path, fmt: str, transform: Transform | None) -> Iterator[tuple[Locator, Any]]:
    if transform is None:
        return iter_records(path, fmt)
    return _transformed(path, fmt, transform)


def _transformed(path: Path, fmt: str, transform: Transform) -> Iterator[tuple[Locator, Any]]:
    for loc, record in iter_records(path, fmt):
        yield loc, (transform(record, loc) if isinstance(record, dict) else record)


class _Index:
    """Pass 1 over the file: every row checked; ids and stream positions of the rows the
    filters keep. Without ``shuffle``/``sample_ids`` the selection is the first ``limit`` kept
    rows, known while reading, so their tasks are built right away and no second pass is needed."""

    def __init__(self, config: DatasetConfig, source: str, benchmark: str, *, eager: bool, cells: bool) -> None:
        self.config = config
        self.cells = cells
        self.source = source
        self.benchmark = benchmark
        self.eager = eager
        self.filters = _Filters(config.filters)
        self.ids: list[str] = []
        self.ordinals: list[int] = []
        self.tasks: list[TaskSpec] = []
        self.total = 0
        self._seen: set[str] = set()
        self._hashed: dict[str, int] = {}

    def scan(self, rows_again: Callable[[], Iterator[tuple[Locator, Any]]], dataset_dir: Path) -> None:
        for loc, record in rows_again():
            self._take(record, loc, dataset_dir, rows_again)

    def scan_jsonl(
        self, path: Path, rows_again: Callable[[], Iterator[tuple[Locator, Any]]], dataset_dir: Path
    ) -> None:
        """:meth:`scan` for a JSONL file read in batches: a batch of plain rows (the mapped columns
        only, of the expected types) is decoded straight into typed structs and checked with a
        few whole-batch operations; any other batch takes the row-by-row path with its located errors."""
        name = str(path)
        typed = _typed_decoder(self.config, self.filters)
        for first, chunk in jsonl_batches(path):
            if typed is not None:
                rows = decode_batch(chunk, typed)
                if rows is not None and self._take_typed(first, rows):
                    continue
                if rows is None:
                    typed = None  # rows of another shape: files are uniform, so stop trying
            records = decode_batch(chunk, _LIST_DECODER)
            if records is None:
                for loc, record in jsonl_lines(name, first, chunk):
                    self._take(record, loc, dataset_dir, rows_again)
                continue
            for line, record in enumerate(records, start=first):
                self._take(record, line, dataset_dir, rows_again)

    def _take(
        self,
        record: Any,
        where: Locator | int,
        dataset_dir: Path,
        rows_again: Callable[[], Iterator[tuple[Locator, Any]]],
    ) -> None:
        """One row checked; ``where`` is its Locator, or its line in :attr:`source` (a JSONL
        file), from which a Locator is made only when the row needs one (the common row does not)."""
        ordinal = self.total
        self.total += 1
        if self.total > row_limit():
            raise too_large(Path(self.source), f"has more than {row_limit():,} rows")
        limit = self.config.limit
        build = self.eager and (limit is None or len(self.tasks) < limit)
        fields = self.config.fields
        row = _fast(record, fields, self.cells, build)
        if row is None:
            loc = self._locator(where)
            row = map_record(record, loc, fields, dataset_dir=dataset_dir, with_metadata=build, text_cells=self.cells)
        tid = row.task_id if row.task_id is not None else _hash_id(row, self._hashed)
        if tid in self._seen:
            raise self._duplicate(tid, self._locator(where), rows_again)
        self._seen.add(tid)
        if self.filters.keep(record):
            if build:
                self.tasks.append(_task(tid, row, _row_number(where), self.source, self.benchmark))
            elif not self.eager:  # the second pass needs ids and positions; eager mode does not
                self.ids.append(tid)
                self.ordinals.append(ordinal)

    def _take_typed(self, first: int, rows: list[Any]) -> bool:
        """A typed batch (lines ``first``…) taken whole; False, with nothing taken, when a row
        needs the row-by-row path (an id with surrounding spaces, a repeated id: its error)."""
        ids = [r.tid for r in rows]
        seen = self._seen
        if list(map(str.strip, ids)) != ids or len(set(ids)) != len(ids) or not seen.isdisjoint(ids):
            return False
        if self.total + len(rows) > row_limit():
            return False  # the row-by-row path raises E0219 at the right row
        ordinal = self.total
        self.total += len(rows)
        seen.update(ids)
        if not self.eager:
            self.ids.extend(ids)
            self.ordinals.extend(range(ordinal, ordinal + len(rows)))
            return True
        limit = self.config.limit
        room = len(rows) if limit is None else max(0, min(len(rows), limit - len(self.tasks)))
        fields = self.config.fields
        source, intern = self.source, sys.intern
        targets = [r.target for r in rows] if fields.target is not None else [None] * len(rows)
        categories = [intern(r.category or "all") for r in rows] if fields.category is not None else None
        self.tasks.extend(
            [
                TaskSpec(
                    task_id=r.tid,
                    question=r.question,
                    category=categories[i] if categories is not None else "all",
                    ground_truth=targets[i],
                    metadata={"dataset": source, "row": first + i},
                    env_variables=_NO_ENV,
                    run_env_variables=_NO_ENV,
                    evaluation_env_variables=_NO_ENV,
                    load_warnings=_NO_WARNINGS,
                    steps=_NO_STEPS,
                )
                for i, r in zip(range(room), rows, strict=False)
            ]
        )
        return True

    def _locator(self, where: Locator | int) -> Locator:
        return where if isinstance(where, Locator) else Locator(self.source, line=where)

    def _duplicate(self, tid: str, loc: Locator, rows_again: Callable[[], Iterator[tuple[Locator, Any]]]) -> Exception:
        """The error for a repeated id, naming its first place (found by reading again: rare path)."""
        first = "an earlier row"
        hashed: dict[str, int] = {}
        for other, record in rows_again():
            try:
                row = map_record(
                    record, other, self.config.fields, dataset_dir=Path(), with_metadata=False, text_cells=self.cells
                )
            except AcxPlanError:
                continue
            if (row.task_id if row.task_id is not None else _hash_id(row, hashed)) == tid:
                first = other.where()
                break
        return loc.error(
            f"duplicate task id {tid!r} (first at {first})",
            "task ids must be unique within a dataset (or set fields.id: null for content hashes)",
            code="E0403",
            field=self.config.fields.id,
        )


def _row_number(where: Locator | int) -> int | None:
    if isinstance(where, int):
        return where
    return where.line if where.line is not None else where.record


def _typed_decoder(config: DatasetConfig, filters: _Filters) -> msgspec.json.Decoder[list[Any]] | None:
    """A decoder of a batch of plain rows — exactly the mapped id, input, optional target and
    category columns, all text — into structs; None when the mapping needs more than that
    (choices, files, content-hash ids, chosen metadata columns, filters): those rows take the
    row-by-row path."""
    f = config.fields
    if f.id is None or f.choices is not None or f.files is not None or f.system_prompt or f.metadata is not None:
        return None
    if filters.wanted:
        return None
    columns = [c for c in (f.id, f.input, f.target, f.category) if c is not None]
    if len(set(columns)) != len(columns):
        return None
    return _plain_row_decoder(f.id, f.input, f.target, f.category)


@functools.lru_cache(maxsize=16)
def _plain_row_decoder(
    id_col: str, input_col: str, target_col: str | None, category_col: str | None
) -> msgspec.json.Decoder[list[Any]]:
    # Unknown columns are refused (they would be the task's metadata: the row-by-row path keeps
    # them); ids must be non-empty, as the row-by-row check requires.
    # A column that is not mapped is no field at all: a row holding it takes the other path,
    # which keeps it as metadata.
    spec: list[Any] = [("tid", Annotated[str, msgspec.Meta(min_length=1)]), ("question", str)]
    rename = {"tid": id_col, "question": input_col}
    if target_col is not None:
        spec.append(("target", str))
        rename["target"] = target_col
    if category_col is not None:
        spec.append(("category", str | None, None))
        rename["category"] = category_col
    row = msgspec.defstruct("PlainRow", spec, rename=rename, forbid_unknown_fields=True, gc=False)
    return msgspec.json.Decoder(list[row])  # type: ignore[valid-type]


def _hash_id(row: MappedRow, hashed: dict[str, int]) -> str:
    base = content_id(row)
    n = hashed.get(base, 0) + 1
    hashed[base] = n
    # Identical rows get -2, -3 … in file order: stable for a given file.
    return base if n == 1 else f"{base}-{n}"


def _select(ids: list[str], config: DatasetConfig, total: int) -> list[int]:
    """Positions (into ``ids``) of the selected tasks, in the order they run (B4)."""
    from acx.components.benchmarks import normalize_sample_ids

    positions = list(range(len(ids)))
    wanted = normalize_sample_ids(config.sample_ids)
    if wanted is not None:
        where = {tid: i for i, tid in enumerate(ids)}
        unknown = [w for w in wanted if w not in where]
        if unknown:
            hint = did_you_mean(unknown[0], ids[:10000])
            filtered = " (after filters)" if config.filters else ""
            raise AcxPlanError(
                f"unknown benchmark sample_ids: {', '.join(unknown[:5])}{' …' if len(unknown) > 5 else ''}",
                code="E0404",
                path="benchmark.sample_ids",
                help=(f"did you mean {hint!r}? " if hint else "")
                + f"sample_ids must name task ids of the dataset ({len(ids)} of {total} rows{filtered})",
            )
        keep = set(wanted)
        positions = [i for i in positions if ids[i] in keep]
    if config.shuffle:
        random.Random(config.seed).shuffle(positions)
    if config.limit is not None:
        positions = positions[: config.limit]
    return positions


def load_dataset(
    config: DatasetConfig,
    base_dir: Path,
    *,
    benchmark: str = "dataset",
    transform: Transform | None = None,
    missing_help: str | None = None,
    lenient_filters: bool = False,
) -> list[TaskSpec]:
    """The selected tasks of a dataset file, in run order (see the module docstring).

    ``transform`` rewrites each raw record before mapping (presets: decrypting BrowseComp rows,
    GAIA's attachment column); ``missing_help`` replaces the help line of a missing path;
    ``lenient_filters`` lets a filter name a column no row has (a preset's own default filter).
    """
    path = resolve_dataset_path(config.path, base_dir, missing_help=missing_help)
    fmt = detect_format(path, config.format)
    with _gc_paused(freeze=_is_large(path)):
        return _load(config, path, fmt, benchmark, transform, lenient_filters)


#: From this file size on (~200 k rows of short JSONL) the loaded tasks are frozen out of the
#: cyclic collector's generations (:func:`_gc_paused`); smaller loads keep the plain pause.
_FREEZE_BYTES = 16 << 20


def _is_large(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size >= _FREEZE_BYTES
    except OSError:
        return False


@contextlib.contextmanager
def _gc_paused(*, freeze: bool = False) -> Iterator[None]:
    """Loading allocates millions of acyclic dicts and structs: the cyclic collector would walk
    them again and again (≈40 % of the time for 1 M rows) and can free nothing.

    ``freeze`` (a large file): when loading succeeds, the objects it made are moved to the
    collector's permanent generation (``gc.freeze``), so re-enabling the collector does not walk
    a million TaskSpecs in the next young collections (0.4–0.7 s for 1 M rows, issue 30) nor in
    every later full one; they are still freed by reference counting when the tasks are dropped.
    A collection before loading first frees what was already garbage, so that freezing only
    keeps what is alive (loading itself makes no reference cycles)."""
    was_enabled = gc.isenabled()
    if freeze and was_enabled:
        gc.collect()
    gc.disable()
    try:
        yield
        if freeze and was_enabled:
            gc.freeze()
    finally:
        if was_enabled:
            gc.enable()


def _load(
    config: DatasetConfig, path: Path, fmt: str, benchmark: str, transform: Transform | None, lenient_filters: bool
) -> list[TaskSpec]:
    source = str(path)
    cells = fmt in ("csv", "tsv")
    index = _Index(config, source, benchmark, eager=not config.shuffle and config.sample_ids is None, cells=cells)
    rows_again = lambda: _rows(path, fmt, transform)  # noqa: E731
    if fmt == "jsonl" and transform is None:
        index.scan_jsonl(path, rows_again, path.parent)
    else:
        index.scan(rows_again, path.parent)
    if index.total == 0:
        raise AcxPlanError(
            f"dataset {path} has no records",
            code="E0402",
            path="benchmark.params.path",
            help="add rows; for JSONL one JSON object per line",
        )
    index.filters.check(index.total, lenient=lenient_filters)
    if index.eager:
        return index.tasks
    ids, ordinals = index.ids, index.ordinals
    positions = _select(ids, config, index.total)
    wanted = {ordinals[p]: k for k, p in enumerate(positions)}
    out: list[TaskSpec | None] = [None] * len(positions)
    remaining = len(wanted)
    picked = _picked_jsonl(path, wanted) if fmt == "jsonl" and transform is None else _picked(path, fmt, transform)
    for ordinal, loc, record in picked:
        if remaining == 0:
            break
        k = wanted.get(ordinal)
        if k is None:
            continue
        row = map_record(record, loc, config.fields, dataset_dir=path.parent, text_cells=cells)
        out[k] = _task(ids[positions[k]], row, _row_number(loc), source, benchmark)
        remaining -= 1
    return [t for t in out if t is not None]


def _picked(path: Path, fmt: str, transform: Transform | None) -> Iterator[tuple[int, Locator, Any]]:
    for ordinal, (loc, record) in enumerate(_rows(path, fmt, transform)):
        yield ordinal, loc, record


def _picked_jsonl(path: Path, wanted: Mapping[int, int]) -> Iterator[tuple[int, Locator, Any]]:
    """The ``wanted`` rows of a JSONL file the first pass checked, by ordinal (the row's place
    among the non-blank lines), the only lines decoded. A batch without blank lines maps
    ordinals to lines directly; one with them is walked line by line."""
    name, base = str(path), 0
    ordinals = sorted(wanted)
    for first, chunk in jsonl_batches(path):
        body = chunk[:-1] if chunk.endswith(b"\n") else chunk
        lines = body.split(b"\n")
        if lines[0].strip() and lines[-1].strip() and _BLANK_LINE.search(body) is None:
            lo, hi = bisect.bisect_left(ordinals, base), bisect.bisect_left(ordinals, base + len(lines))
            for ordinal in ordinals[lo:hi]:
                i = ordinal - base
                yield ordinal, Locator(name, line=first + i), _ROW_DECODER.decode(lines[i])
            base += len(lines)
            continue
        for lineno, raw in enumerate(lines, start=first):
            if not raw.strip():
                continue
            if base in wanted:
                yield base, Locator(name, line=lineno), _ROW_DECODER.decode(raw)
            base += 1


#: A line inside a batch holding nothing but whitespace (what ``bytes.strip`` removes), or an empty
#: one (the first and last lines are checked apart: an anchored pattern scans 25x slower).
_BLANK_LINE = re.compile(rb"\n[ \t\r\x0b\x0c]*\n")


def _task(task_id: str, row: MappedRow, row_number: int | None, source: str, benchmark: str) -> TaskSpec:
    meta: dict[str, Any] = {"dataset": source, "row": row_number}
    if row.metadata:
        meta["record"] = row.metadata
    if row.choices is not None:
        meta["choices"] = row.choices
    if row.messages is not None:
        meta["messages"] = row.messages
    if row.files:
        meta["files"] = row.files
    if row.system_prompt is not None:
        meta["system_prompt"] = row.system_prompt
    # Memory per task matters at 1 M rows: categories repeat (one shared string each), and the
    # empty env maps / warning and step lists are shared instead of fresh containers per task (msgspec
    # copies mutable defaults); TaskSpec is a frozen IR value nobody mutates in place.
    return TaskSpec(
        task_id=task_id,
        question=row.question,
        category=sys.intern(row.category),
        ground_truth=row.target,
        metadata=meta,
        env_variables=_NO_ENV,
        run_env_variables=_NO_ENV,
        evaluation_env_variables=_NO_ENV,
        load_warnings=_NO_WARNINGS,
        steps=_NO_STEPS,
    )


_ROW_DECODER = msgspec.json.Decoder()
_LIST_DECODER: msgspec.json.Decoder[list[Any]] = msgspec.json.Decoder(list[Any])
_NO_ENV: dict[str, str] = {}
_NO_WARNINGS: list[str] = []
_NO_STEPS: list[Any] = []  # shared: a fresh empty list per task is 1 M more objects for the collector to walk
