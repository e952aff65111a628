"""Where an installed agent's answer is: the ``answer`` field of an ``installed_agent`` config
(``AnswerFromStdout`` | ``AnswerFromFile`` | ``AnswerFromJsonl``, docs/agents.md "The answer").

:func:`check` validates a spec at plan time (a located E0433); :func:`extract` is pure: given
the agent's stdout and, for the file forms, the file's text (or why it could not be read), it
returns the answer or the ``answer_not_found`` issue saying what was looked for. It never raises
on what an agent wrote.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from acx.components._configs import AnswerFromFile, AnswerFromStdout, AnswerSpec
from acx.errors import AcxPlanError
from acx.ir import ExecutionIssue

__all__ = ["Extracted", "check", "describe", "extract", "source_path"]

_INDEX = re.compile(r"-?[0-9]+")
_MISSING = object()


@dataclass(frozen=True)
class Extracted:
    answer: str | None
    issue: ExecutionIssue | None = None


def _plan_error(field: str, message: str, help: str) -> AcxPlanError:
    return AcxPlanError(message, code="E0433", path=f"harness.params.answer.{field}", help=help)


def _check_dotted(value: str, field: str) -> None:
    if not value or any(part == "" for part in value.split(".")):
        raise _plan_error(
            field,
            f"{field} {value!r} is not a dotted path (an empty key)",
            "write keys separated by dots, integers for list positions: `info.submission`, `messages.-1.content`",
        )


def check(spec: AnswerSpec) -> None:
    """Refuse at plan time what no attempt could use: a regex that does not compile, an empty
    path, a dotted path with an empty key, ``where`` on a file read as text."""
    regex = spec.regex if isinstance(spec, (AnswerFromStdout, AnswerFromFile)) else None
    if regex is not None:
        try:
            re.compile(regex)
        except re.error as exc:
            raise _plan_error(
                "regex", f"regex {regex!r} does not compile: {exc}", "give a Python regular expression"
            ) from None
    if isinstance(spec, AnswerFromStdout):
        return
    if spec.path is not None and not spec.path.strip():
        raise _plan_error("path", "path is empty", "give the sandbox path of the file the agent writes")
    for key in spec.where:
        _check_dotted(key, f"where.{key}" if key else "where")
    if isinstance(spec, AnswerFromFile):
        if spec.json_path is not None and spec.regex is not None:
            raise _plan_error(
                "regex",
                "`regex` and `json_path` both say how to read the file",
                "keep json_path (the file is JSON) or regex (the file is text)",
            )
        if spec.json_path is not None:
            _check_dotted(spec.json_path, "json_path")
        elif spec.where:
            raise _plan_error(
                "where",
                "`where` needs `json_path`: a file read as text has no fields",
                "add json_path (the file is JSON), or drop where",
            )
    else:
        fields = _fields(spec.field)
        if not fields:
            raise _plan_error("field", "field is an empty list", "name at least one dotted path")
        for f in fields:
            _check_dotted(f, "field")


def source_path(spec: AnswerSpec) -> str | None:
    """The sandbox file the spec reads (None: stdout)."""
    return None if isinstance(spec, AnswerFromStdout) else spec.path


def describe(spec: AnswerSpec) -> str:
    """What the spec looks for, in words (issue messages, docs)."""
    if isinstance(spec, AnswerFromStdout):
        what = "the last non-blank line of stdout" if spec.pick == "last_line" else "stdout"
        return f"a match of /{spec.regex}/ in {what}" if spec.regex is not None else what
    if isinstance(spec, AnswerFromFile):
        if spec.regex is not None:
            return f"a match of /{spec.regex}/ in the file {spec.path}"
        if spec.json_path is None:
            return f"the file {spec.path}"
        cond = f" (with {_conds(spec.where)})" if spec.where else ""
        return f"`{spec.json_path}` in the JSON file {spec.path}{cond}"
    source = spec.path if spec.path is not None else "stdout"
    cond = f" where {_conds(spec.where)}" if spec.where else ""
    names = " or ".join(f"`{f}`" for f in _fields(spec.field))
    return f"{names} of the {spec.pick} JSON event{cond} in {source}"


def _fields(field: str | list[str]) -> list[str]:
    return [field] if isinstance(field, str) else list(field)


def _conds(where: dict[str, Any]) -> str:
    return " and ".join(f"{k} == {json.dumps(v)}" for k, v in where.items())


def _get(doc: Any, dotted: str) -> Any:
    cur = doc
    for part in dotted.split("."):
        if isinstance(cur, dict):
            if part not in cur:
                return _MISSING
            cur = cur[part]
        elif isinstance(cur, list) and _INDEX.fullmatch(part):
            i = int(part)
            if not -len(cur) <= i < len(cur):
                return _MISSING
            cur = cur[i]
        else:
            return _MISSING
    return cur


def _same(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1, 1 is 1.0.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b) and (a is None) == (b is None)


def _matches(doc: Any, where: dict[str, Any]) -> bool:
    return all(_same(_get(doc, k), v) for k, v in where.items())


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _not_found(spec: AnswerSpec, why: str) -> Extracted:
    return Extracted(
        None,
        ExecutionIssue(
            severity="error",
            phase="run",
            code="answer_not_found",
            message=f"the agent's answer was not found: looked for {describe(spec)}; {why}",
        ),
    )


def _value(spec: AnswerSpec, value: Any, where: str) -> Extracted:
    if value is _MISSING:
        return _not_found(spec, f"{where} has no such field")
    if value is None:
        return _not_found(spec, f"the field is null in {where}")
    return Extracted(_as_text(value))


def _search(spec: AnswerSpec, regex: str, text: str) -> Extracted:
    """The last match of ``regex`` in ``text``: its group ``answer``, else group 1, else all of it."""
    try:
        matches = list(re.finditer(regex, text))
    except re.error as exc:  # checked at plan time; a spec built by hand
        return _not_found(spec, f"the regex does not compile ({exc})")
    if not matches:
        return _not_found(spec, "no match")
    m = matches[-1]
    if "answer" in m.re.groupindex:
        got = m.group("answer")
    elif m.re.groups:
        got = m.group(1)
    else:
        got = m.group(0)
    if got is None:
        return _not_found(spec, "the group took part in no match")
    return Extracted(got)


def extract(spec: AnswerSpec, stdout: str, file_text: str | None = None, file_error: str | None = None) -> Extracted:
    """The answer per ``spec`` from ``stdout`` or the file's text. For a spec with a file
    (:func:`source_path`), ``file_text`` is its content, or None with ``file_error`` saying why."""
    if isinstance(spec, AnswerFromStdout):
        text = stdout
        if spec.pick == "last_line":
            lines = [line for line in stdout.splitlines() if line.strip()]
            if not lines:
                return _not_found(spec, "stdout has no non-blank line")
            text = lines[-1]
        if spec.regex is None:
            return Extracted(text)
        return _search(spec, spec.regex, text)
    if spec.path is not None:
        if file_text is None:
            return _not_found(spec, file_error or f"{spec.path} could not be read")
        text = file_text
        where_from = spec.path
    else:
        text = stdout
        where_from = "stdout"
    if isinstance(spec, AnswerFromFile):
        if spec.regex is not None:
            return _search(spec, spec.regex, text)
        if spec.json_path is None:
            return Extracted(text)
        try:
            doc = json.loads(text)
        except ValueError as exc:
            return _not_found(spec, f"{where_from} is not JSON ({exc})")
        if spec.where and not _matches(doc, spec.where):
            got = ", ".join(
                f"{k} is {'absent' if (v := _get(doc, k)) is _MISSING else json.dumps(v, ensure_ascii=False)[:200]}"
                for k in spec.where
            )
            return _not_found(spec, f"the document does not satisfy the conditions: {got}")
        return _value(spec, _get(doc, spec.json_path), where_from)
    events = 0
    found: Any = _MISSING
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        events += 1
        if _matches(doc, spec.where):
            found = doc
            if spec.pick == "first":
                break
    if found is _MISSING:
        return _not_found(spec, f"none of the {events} JSON event(s) in {where_from} matches")
    # The first field the event has (agents with several event shapes for their final word).
    value: Any = _MISSING
    for name in _fields(spec.field):
        value = _get(found, name)
        if value is not _MISSING:
            break
    return _value(spec, value, f"the {spec.pick} matching event")
