"""Field mapping: one raw row → the typed parts of a task, with located errors.

A row is checked completely (every mapped field's type) when the dataset is indexed, so a bad row
anywhere in the file is reported with its file, line or row number and field before anything runs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acx.components._configs import FieldMapping
from acx.components.datasets._formats import Locator

__all__ = ["MappedRow", "choice_index", "map_record"]

_ROLES = ("system", "user", "assistant", "tool", "developer")


@dataclass(frozen=True, slots=True)
class MappedRow:
    task_id: str | None  # None: derive from the content hash
    question: str
    messages: list[dict[str, Any]] | None
    target: Any  # a value or a list of values; None when unmapped
    choices: list[str] | None
    category: str
    metadata: dict[str, Any]
    files: dict[str, str] | None
    system_prompt: str | None


def _maybe_json(value: Any, cells: bool) -> Any:
    """CSV/TSV cells are text: a cell holding a JSON list/object (choices, messages, files) is
    parsed. Values of JSON/Parquet rows are typed already and never re-parsed."""
    if cells and isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _scalar_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # Parquet/pandas often store integer ids as floats
    return None


def _fast(record: Any, fields: FieldMapping, text_cells: bool, with_metadata: bool) -> MappedRow | None:
    """The common row (string id, text input and target, optional category) mapped with a few
    type checks; anything else (or anything wrong) takes the full path with its located errors."""
    if type(record) is not dict or fields.choices is not None or fields.files is not None or fields.system_prompt:
        return None
    tid = record.get(fields.id) if fields.id is not None else None
    question = record.get(fields.input)
    target = record.get(fields.target) if fields.target is not None else None
    if type(question) is not str or (fields.id is not None and (type(tid) is not str or not tid or tid.strip() != tid)):
        return None
    if fields.target is not None and type(target) is not str:
        return None
    if text_cells and (question[:1] in ("[", "{") or (target is not None and target[:1] in ("[", "{"))):
        return None
    category = "all"
    if fields.category is not None:
        cat = record.get(fields.category)
        if type(cat) is str and cat:
            category = cat
        elif cat not in (None, ""):
            return None
    return MappedRow(
        task_id=tid,
        question=question,
        messages=None,
        target=target,
        choices=None,
        category=category,
        metadata=_metadata(record, fields) if with_metadata else {},
        files=None,
        system_prompt=None,
    )


def map_record(
    record: Any,
    loc: Locator,
    fields: FieldMapping,
    *,
    dataset_dir: Path,
    with_metadata: bool = True,
    text_cells: bool = False,
) -> MappedRow:
    """Check a row completely and map it; ``with_metadata=False`` (the indexing pass) skips
    copying the unmapped columns, which only the selected rows need. ``text_cells``: the values
    are CSV/TSV text, where a cell holding a JSON list/object (choices, messages) is parsed."""
    fast = _fast(record, fields, text_cells, with_metadata)
    if fast is not None:
        return fast
    if not isinstance(record, dict):
        raise loc.error(
            f"the {loc.kind if loc.line is None else 'line'} is a JSON {type(record).__name__}, not an object",
            'each record is an object such as {"id": "q1", "input": "…", "target": "…"}',
        )
    task_id = _id(record, loc, fields)
    question, messages = _input(record, loc, fields, text_cells)
    target = _target(record, loc, fields, text_cells)
    choices = _choices(record, loc, fields, text_cells)
    if choices is not None and target is not None:
        for t in target if isinstance(target, list) else [target]:
            if choice_index(t, choices) is None:
                raise loc.error(
                    f"target {t!r} names none of the {len(choices)} choices",
                    "give the correct choice as a letter (A, B, …), a 0-based index, or the exact choice text",
                    code="E0405",
                    field=fields.target,
                )
    category = _category(record, loc, fields)
    files = _files(record, loc, fields, dataset_dir, text_cells)
    system_prompt = _optional_text(record, loc, fields.system_prompt)
    return MappedRow(
        task_id=task_id,
        question=question,
        messages=messages,
        target=target,
        choices=choices,
        category=category,
        metadata=_metadata(record, fields) if with_metadata else {},
        files=files,
        system_prompt=system_prompt,
    )


def _missing(loc: Locator, column: str, role: str, help: str) -> Exception:
    return loc.error(f"the row has no `{column}` column ({role})", help, code="E0405", field=column)


def _id(record: dict[str, Any], loc: Locator, fields: FieldMapping) -> str | None:
    if fields.id is None:
        return None
    if fields.id not in record:
        raise _missing(
            loc,
            fields.id,
            "the task id",
            "map the id column with fields.id, or set fields.id: null to use content hashes as ids",
        )
    text = _scalar_text(record[fields.id])
    if text is None or not text.strip() or text != text.strip():
        raise loc.error(
            f"task id {record[fields.id]!r} is not a non-empty string or integer without surrounding spaces",
            "give every row a unique id, or set fields.id: null to use content hashes",
            code="E0403",
            field=fields.id,
        )
    return text


def _input(
    record: dict[str, Any], loc: Locator, fields: FieldMapping, cells: bool
) -> tuple[str, list[dict[str, Any]] | None]:
    if fields.input not in record:
        raise _missing(loc, fields.input, "the input", "map the prompt column with fields.input")
    value = _maybe_json(record[fields.input], cells)
    if isinstance(value, str):
        return value, None
    if isinstance(value, list) and value:
        messages = []
        for i, m in enumerate(value):
            if not (isinstance(m, dict) and m.get("role") in _ROLES and isinstance(m.get("content"), str | list)):
                raise loc.error(
                    f"input message {i} is not a {{role, content}} chat message",
                    f"each message needs a role ({', '.join(_ROLES)}) and a content",
                    code="E0405",
                    field=fields.input,
                )
            messages.append({"role": m["role"], "content": m["content"]})
        users = [m for m in messages if m["role"] == "user"]
        if not users:
            raise loc.error(
                "the chat input has no user message",
                "add a {role: user, content: …} message",
                code="E0405",
                field=fields.input,
            )
        last = users[-1]["content"]
        return (last if isinstance(last, str) else json.dumps(last, ensure_ascii=False)), messages
    raise loc.error(
        f"input is a {type(value).__name__}, not text or a list of chat messages",
        "the input column holds the prompt text or [{role, content}, …]",
        code="E0405",
        field=fields.input,
    )


def _target(record: dict[str, Any], loc: Locator, fields: FieldMapping, cells: bool) -> Any:
    if fields.target is None:
        return None
    if fields.target not in record:
        raise _missing(
            loc,
            fields.target,
            "the target",
            "map the answer column with fields.target, or set it to null for scorers without a target",
        )
    value = _maybe_json(record[fields.target], cells)
    items = value if isinstance(value, list) else [value]
    if not items or any(not isinstance(v, str | int | float) or isinstance(v, bool) for v in items):
        raise loc.error(
            f"target {value!r} is not a value or a non-empty list of values (text or numbers)",
            "the target column holds the answer, or a list of acceptable answers",
            code="E0405",
            field=fields.target,
        )
    return value


def _choices(record: dict[str, Any], loc: Locator, fields: FieldMapping, cells: bool) -> list[str] | None:
    spec = fields.choices
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec not in record:
            raise _missing(loc, spec, "the choices", "map the choices column with fields.choices")
        value = _maybe_json(record[spec], cells)
        if not isinstance(value, list):
            raise loc.error(
                f"choices is a {type(value).__name__}, not a list",
                "the choices column holds a list of options",
                code="E0405",
                field=spec,
            )
        raw = value
    else:
        for col in spec:
            if col not in record:
                raise _missing(loc, col, "a choice", "fields.choices lists one column per choice")
        raw = [record[col] for col in spec]
    out = []
    for c in raw:
        text = c if isinstance(c, str) else _scalar_text(c)
        if text is None:
            raise loc.error(
                f"choice {c!r} is not text", "choices are strings (or numbers)", code="E0405", field=str(spec)
            )
        out.append(text)
    if len(out) < 2 or len(out) > 26:
        raise loc.error(
            f"{len(out)} choices; multiple choice needs 2 to 26",
            "check the choices column",
            code="E0405",
            field=str(spec),
        )
    return out


def choice_index(target: Any, choices: list[str]) -> int | None:
    """A target as a choice index: a letter, a 0-based integer index, or the exact choice text."""
    if isinstance(target, int) and not isinstance(target, bool):
        return target if 0 <= target < len(choices) else None
    if isinstance(target, float) and target.is_integer():
        return choice_index(int(target), choices)
    if not isinstance(target, str):
        return None
    t = target.strip()
    if len(t) == 1 and t.isalpha() and t.isupper() and ord(t) - 65 < len(choices):
        return ord(t) - 65
    return choices.index(target) if target in choices else None


def _category(record: dict[str, Any], loc: Locator, fields: FieldMapping) -> str:
    if fields.category is None:
        return "all"
    if fields.category not in record or record[fields.category] in (None, ""):
        return "all"
    text = _scalar_text(record[fields.category])
    if text is None:
        raise loc.error("category is not text", "categories are strings", code="E0405", field=fields.category)
    return text


def _optional_text(record: dict[str, Any], loc: Locator, column: str | None) -> str | None:
    if column is None or record.get(column) in (None, ""):
        return None
    value = record[column]
    if not isinstance(value, str):
        raise loc.error(f"`{column}` is not text", "this column holds text", code="E0405", field=column)
    return value


def _files(
    record: dict[str, Any], loc: Locator, fields: FieldMapping, dataset_dir: Path, cells: bool
) -> dict[str, str] | None:
    column = fields.files
    if column is None or record.get(column) in (None, "", {}):
        return None
    value = _maybe_json(record[column], cells)
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise loc.error(
            "files is not a mapping of sandbox path → source",
            'e.g. {"data/input.txt": "files/q1.txt"} (host path relative to the dataset file) or a data: URI',
            code="E0405",
            field=column,
        )
    out: dict[str, str] = {}
    for dest, source in value.items():
        if not dest or "\0" in dest or ".." in Path(dest).parts:
            raise loc.error(
                f"sandbox path {dest!r} is empty or climbs out with `..`",
                "use a path inside the workdir or an absolute one",
                code="E0405",
                field=column,
            )
        if source.startswith("data:"):
            out[dest] = source
            continue
        host = Path(source).expanduser()
        host = host if host.is_absolute() else dataset_dir / host
        if not host.is_file():
            raise loc.error(
                f"file {source!r} for sandbox path {dest!r} does not exist ({host})",
                "host paths are relative to the dataset file's directory",
                code="E0405",
                field=column,
            )
        out[dest] = str(host.resolve())
    return out


def _metadata(record: dict[str, Any], fields: FieldMapping) -> dict[str, Any]:
    if fields.metadata is not None:
        return {k: record[k] for k in fields.metadata if k in record}
    mapped = {fields.id, fields.input, fields.target, fields.category, fields.files, fields.system_prompt}
    if isinstance(fields.choices, str):
        mapped.add(fields.choices)
    elif fields.choices:
        mapped.update(fields.choices)
    return {k: v for k, v in record.items() if k not in mapped}


def content_id(row: MappedRow) -> str:
    """A stable id from what the task *is*: input, target and choices (not its position)."""
    payload = json.dumps(
        [row.messages if row.messages is not None else row.question, row.target, row.choices],
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
