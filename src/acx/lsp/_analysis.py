"""What the language server answers, as pure functions of a buffer, a cursor and the open buffers.

Positions here are 0-based lines and 0-based *character* columns (the protocol layer converts
UTF-16 offsets). Everything reuses what the CLI commands compute: diagnostics are ``acx check``'s
(:func:`acx.cli._lang.check_file` under :func:`acx.grammar._parser.source_overlay`), key
documentation comes from the JSON Schemas and ``acx config docs``, value provenance from ``acx
explain``, formatting from ``acx fmt``. Cursor context comes from :mod:`acx.lsp._outline`, which
reads half-typed text in one linear pass.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from acx.diagnostics import Diagnostic, Related, Span
from acx.errors import AcxUserError
from acx.lsp._outline import Frame, Outline, Token, outline, tokens

__all__ = [
    "Completion",
    "Location",
    "Symbol",
    "TextEdit",
    "check_buffer",
    "complete",
    "definition",
    "document_symbols",
    "format_buffer",
    "hover",
    "rename_let",
]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*")
_UNSET = re.compile(r"environment variable `([^`]+)` is not set")
_WORD_CHARS = re.compile(r"[A-Za-z0-9_-]*$")
_KEYWORDS = frozenset({"import", "let", "for", "in", "true", "false", "null"})
_COMPONENT_KINDS = {"benchmark": "benchmark", "harness": "harness", "environment": "environment"}
_RUN_CONFIG_SECTIONS = {"benchmark": "benchmarks", "harness": "harnesses", "environment": "environments"}
#: Hover and definition follow imports this deep (a cycle is E0122 for the checker, not a hang here).
_MAX_IMPORT_DEPTH = 16


@dataclass(frozen=True, slots=True)
class Completion:
    label: str
    kind: str  # key | block | component | enum | let | import | keyword | value
    detail: str = ""
    documentation: str = ""
    insert_text: str | None = None


@dataclass(frozen=True, slots=True)
class Location:
    path: str
    line: int  # 0-based
    col: int
    end_line: int
    end_col: int


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str
    kind: str  # orchestration | run | recipe | let | block
    location: Location
    selection: Location
    children: tuple[Symbol, ...] = ()


@dataclass(frozen=True, slots=True)
class TextEdit:
    location: Location
    new_text: str


# ---- positions ----------------------------------------------------------------------------------


def offset_of(text: str, line: int, col: int) -> int:
    """Character offset of a 0-based (line, col), clamped to the text."""
    start = 0
    for _ in range(line):
        nl = text.find("\n", start)
        if nl < 0:
            return len(text)
        start = nl + 1
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    return min(start + max(col, 0), end)


def position_of(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset)
    return line, offset - (text.rfind("\n", 0, offset) + 1)


def _location(path: str, text: str, start: int, end: int) -> Location:
    (l1, c1), (l2, c2) = position_of(text, start), position_of(text, end)
    return Location(path, l1, c1, l2, c2)


# ---- diagnostics --------------------------------------------------------------------------------


def check_buffer(path: str, text: str, open_docs: Mapping[str, str] | None = None) -> list[Diagnostic]:
    """``acx check``'s diagnostics of the buffer ``text`` at ``path`` (other open buffers override
    their files too). A diagnostic in an imported file is reported at the import that leads to it,
    its own location kept as related information."""
    from acx.cli import check_file
    from acx.diagnostics import unique
    from acx.grammar import source_overlay

    overlay = {**(open_docs or {}), path: text}
    with source_overlay(overlay):
        diagnostics = unique(check_file(path))
    me = os.path.realpath(path)
    elsewhere = any(d.span is not None and os.path.realpath(d.span.file) != me for d in diagnostics)
    # Only an error in another file needs the import graph (most checks skip this pass).
    imports = _import_closure(path, text, overlay) if elsewhere else []
    out = []
    for d in diagnostics:
        where = os.path.realpath(d.span.file) if d.span is not None else me
        if where == me:
            out.append(d if d.span is not None else dataclasses.replace(d, span=Span(path, 1, 1)))
            continue
        at = next((span for span, files in imports if where in files), None) or Span(path, 1, 1)
        shown = os.path.relpath(where, os.path.dirname(os.path.abspath(path)))
        out.append(
            dataclasses.replace(
                d,
                message=f"in imported file {shown}: {d.message}",
                span=at,
                related=(Related(d.span, d.message), *d.related) if d.span is not None else d.related,
            )
        )
    return out


def _import_closure(path: str, text: str, overlay: Mapping[str, str]) -> list[tuple[Span, set[str]]]:
    """For each import statement of the buffer: its span and the real paths it reaches."""
    out = []
    for rel, start, end in _full(text).imports:
        (l1, c1), (l2, c2) = position_of(text, start), position_of(text, end)
        reached: set[str] = set()
        _reach(os.path.normpath(os.path.join(os.path.dirname(path), rel)), overlay, reached, 0)
        out.append((Span(path, l1 + 1, c1 + 1, l2 + 1, c2 + 1), reached))
    return out


def imported_files(path: str, text: str, open_docs: Mapping[str, str] | None = None) -> set[str]:
    """Real paths of every file the buffer imports, transitively (open buffers read first)."""
    overlay = {**(open_docs or {}), path: text}
    reached: set[str] = set()
    for _, files in _import_closure(path, text, overlay):
        reached |= files
    return reached


def _reach(path: str, overlay: Mapping[str, str], seen: set[str], depth: int) -> None:
    real = os.path.realpath(path)
    if real in seen or depth > _MAX_IMPORT_DEPTH:
        return
    seen.add(real)
    text = _read(path, overlay)
    if text is None:
        return
    for rel, _, _ in _full(text).imports:
        _reach(os.path.normpath(os.path.join(os.path.dirname(path), rel)), overlay, seen, depth + 1)


def _read(path: str, overlay: Mapping[str, str] | None = None) -> str | None:
    from acx.grammar import read_source, source_overlay

    try:
        with source_overlay(overlay or {}):
            return read_source(path)
    except AcxUserError:
        return None


# ---- formatting ---------------------------------------------------------------------------------


def format_buffer(path: str, text: str) -> str:
    """``acx fmt`` of the buffer (AcxSyntaxError when it does not parse)."""
    from acx.grammar import format_source

    return format_source(text, path)


# ---- schema navigation --------------------------------------------------------------------------


@functools.cache
def _schema(kind: str) -> dict[str, Any]:
    from acx.schemas import load_schema

    return load_schema(kind)


def _deref(node: Any, root: dict[str, Any]) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = root["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _alternatives(node: Any, root: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The object-ish members of a node (anyOf/oneOf/allOf flattened, references followed)."""
    node = _deref(node, root)
    if not isinstance(node, dict):
        return
    branches = [b for k in ("anyOf", "oneOf", "allOf") for b in node.get(k, ())]
    # A component's entry is its own properties plus ``allOf`` the kind's shared definition
    # (schemas by reference): both sides hold keys.
    if not branches or "properties" in node:
        yield node
    for b in branches:
        yield from _alternatives(b, root)


def _properties(node: Any, root: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for alt in _alternatives(node, root):
        for name, sub in alt.get("properties", {}).items():
            props.setdefault(name, sub)
    return props


def _step(node: Any, key: str, root: dict[str, Any]) -> Any:
    for alt in _alternatives(node, root):
        if key in alt.get("properties", {}):
            return alt["properties"][key]
        extra = alt.get("additionalProperties")
        if isinstance(extra, dict):
            return extra
        if alt.get("type") == "array" and isinstance(alt.get("items"), dict):
            return _step(alt["items"], key, root)
    return None


def _select(node: Any, cid: str, root: dict[str, Any]) -> Any:
    """The branch of a component section whose ``id`` is ``cid`` (the section itself otherwise)."""
    for alt in _alternatives(node, root):
        ident = alt.get("properties", {}).get("id", {})
        if ident.get("const") == cid:
            return alt
    return node


def _document_kind(before: Outline, text: str) -> str:
    """orchestration (a top-level `orchestration` or `run`) or run_config: from the block the
    cursor is in when there is one, else from the whole buffer's top level."""
    top = [before.frames[1].kind] if len(before.frames) > 1 else [b.kind for b in _full(text).blocks if b.depth == 1]
    return "orchestration" if {"orchestration", "run"} & set(top) else "run_config"


def _node_at(frames: list[Frame], doc_kind: str) -> tuple[Any, dict[str, Any], str | None]:
    """The schema node of the innermost frame, the schema root, and the component id (if any)."""
    root = _schema(doc_kind)
    node: Any = root
    component: str | None = None
    for f in frames[1:]:
        if node is None:
            break
        if f.what in ("for", "list", "let"):
            continue
        if f.what == "map":
            node = _step(node, f.key or "", root) if f.key else None
            continue
        kind = f.kind or ""
        if kind == "orchestration":
            continue
        if kind == "recipe":
            return None, root, None
        if kind == "run":
            node = _schema("orchestration")["properties"]["requests"]["items"]
            root = _schema("orchestration")
            continue
        if kind in _RUN_CONFIG_SECTIONS and doc_kind == "run_config" and node is root and f.label:
            node = _step(_step(node, _RUN_CONFIG_SECTIONS[kind], root), f.label, root)
            component = f"{kind}:{f.label}"
            continue
        node = _step(node, kind, root)
        if kind in _COMPONENT_KINDS and f.label:
            node = _select(node, f.label, root)
            component = f"{kind}:{f.label}"
    return node, root, component


def _type_of(node: Any, root: dict[str, Any]) -> str:
    names = []
    for alt in _alternatives(node, root):
        if alt.get("title") == "EnvRef" or ("pattern" in alt and "${" in str(alt.get("pattern"))):
            continue
        if "enum" in alt:
            names.append(" | ".join(str(v) for v in alt["enum"]))
        elif "const" in alt:
            names.append(str(alt["const"]))
        elif alt.get("type") == "array":
            names.append(f"list[{_type_of(alt.get('items', {}), root)}]")
        elif "type" in alt:
            names.append(str(alt["type"]))
    return " | ".join(dict.fromkeys(names)) or "any"


def _enum_values(node: Any, root: dict[str, Any]) -> list[str]:
    values: list[str] = []
    for alt in _alternatives(node, root):
        if alt.get("type") == "array":
            values += _enum_values(alt.get("items", {}), root)
        values += [str(v) for v in alt.get("enum", ()) if isinstance(v, str)]
        if alt.get("type") == "boolean":
            values += ["true", "false"]
    return list(dict.fromkeys(values))


def _written(key: str) -> list[str]:
    """How a schema key may be written in ``.acx``: durations and sizes drop their unit suffix."""
    for suffix in ("_seconds", "_mb"):
        if key.endswith(suffix):
            return [key[: -len(suffix)], key]
    return [key]


def _prop_for(props: Mapping[str, Any], key: str) -> tuple[str, Any] | None:
    for name in (key, key + "_seconds", key + "_mb"):
        if name in props:
            return name, props[name]
    return None


# ---- cursor context -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Context:
    before: Outline  # the outline of the text before the word at the cursor
    word: str
    word_start: int
    word_end: int
    token: Token | None  # the token under the cursor


def _context(text: str, offset: int) -> _Context:
    prefix = _WORD_CHARS.search(text[:offset])
    start = offset - (len(prefix.group()) if prefix else 0)
    end = offset
    while end < len(text) and (text[end].isalnum() or text[end] in "_-"):
        end += 1
    token = _token_at(text, offset)
    begin = token.start if token is not None and token.kind in ("str", "ml", "atom") else start
    return _Context(outline(text[:begin]), text[start:end], start, end, token)


def _token_at(text: str, offset: int) -> Token | None:
    """The token the cursor is in or just after (its line is scanned, not the file)."""
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    line_end = len(text) if line_end < 0 else line_end
    for t in tokens(text[line_start:line_end]):
        start, end = t.start + line_start, t.end + line_start
        if start < offset <= end:
            return Token(t.kind, t.text, start, end)
        if start > offset:
            break
    return None


@functools.lru_cache(maxsize=8)
def _full(text: str) -> Outline:
    """The outline of a whole buffer (completion and hover ask for it once per text)."""
    return outline(text)


# ---- completion ---------------------------------------------------------------------------------


_STATEMENTS = {
    "top": ("import", "let", "orchestration", "run", "recipe"),
    "orchestration": ("run", "for", "let", "defaults", "runtime", "task_concurrency"),
}


def complete(path: str, text: str, line: int, col: int, open_docs: Mapping[str, str] | None = None) -> list[Completion]:
    """Completion items at the cursor: keys of the schema at the cursor's path, component ids,
    enum values, let names and import paths."""
    offset = offset_of(text, line, col)
    ctx = _context(text, offset)
    out = ctx.before
    if ctx.token is not None and ctx.token.kind in ("str", "ml"):
        # Inside a string: only an import path has something to complete.
        return _import_items(path) if out.expect == "import" else []
    if out.expect == "label" and out.key in _COMPONENT_KINDS:
        return _component_items(out.key)
    doc_kind = _document_kind(out, text)
    if out.expect == "value":
        return _value_items(path, text, out, doc_kind, open_docs)
    if out.expect != "stmt":
        return []
    if len(out.frames) == 1:
        return [Completion(k, "keyword") for k in _STATEMENTS["top"]] + (
            _key_items(out.frames, doc_kind) if doc_kind == "run_config" else []
        )
    return _key_items(out.frames, doc_kind) + [Completion(k, "keyword") for k in ("let", "for")]


def _key_items(frames: list[Frame], doc_kind: str) -> list[Completion]:
    node, root, _ = _node_at(frames, doc_kind)
    if node is None:
        return []
    items = []
    if frames[-1].kind == "orchestration":
        items.append(Completion("run", "block", "run NAME { … }: one request"))
    if len(frames) == 1 and doc_kind == "run_config":
        for kind, section in _RUN_CONFIG_SECTIONS.items():
            items.append(Completion(kind, "block", f"{kind} ID {{ … }} (run config `{section}`)"))
    for name, sub in _properties(node, root).items():
        if name == "requests" or (name == "id" and frames[-1].label):
            continue
        sub = _deref(sub, root)
        doc = _describe(sub, root)
        for written in _written(name):
            kind = "block" if _is_record(sub, root) else "key"
            detail = _type_of(sub, root) + (f" → {name}" if written != name else "")
            items.append(Completion(written, kind, detail, doc))
    return items


def _is_record(node: Any, root: dict[str, Any]) -> bool:
    return any(alt.get("type") == "object" and "properties" in alt for alt in _alternatives(node, root))


def _describe(node: Any, root: dict[str, Any]) -> str:
    parts = [str(node.get("description", ""))] if isinstance(node, dict) else []
    if isinstance(node, dict) and "default" in node:
        import json

        parts.append(f"default: {json.dumps(node['default'])}")
    return "\n\n".join(p for p in parts if p)


def _component_items(kind: str) -> list[Completion]:
    from acx.components import registry

    return [
        Completion(cid, "component", f"{kind} ({info.origin})", info.description)
        for cid, info in sorted(registry(kind).items())
    ]


def _value_items(
    path: str, text: str, out: Outline, doc_kind: str, open_docs: Mapping[str, str] | None
) -> list[Completion]:
    items: list[Completion] = []
    if out.key:
        node, root, _ = _node_at(out.frames, doc_kind)
        props = _properties(node, root) if node is not None else {}
        found = _prop_for(props, out.key)
        values = _enum_values(found[1], root) if found is not None else []
        if not values:
            from acx.compiler import enum_values

            values = sorted(enum_values(out.key))
        for v in values:
            bare = v.replace("-", "_")  # how .acx writes enum values (`no-network` → `no_network`)
            insert = bare if _NAME.fullmatch(bare) else f'"{v}"'
            items.append(Completion(insert, "enum", f"{out.key} value"))
    for name, where in _visible_lets(path, text, open_docs):
        items.append(Completion(name, "let", f"let (in {os.path.basename(where)})"))
    items += [Completion(n, "keyword") for n in out.loop_vars]
    items.append(Completion('env("")', "value", "read an environment variable", insert_text='env("$1")'))
    items.append(Completion('secret("")', "value", "a secret, kept as a reference", insert_text='secret("$1")'))
    return items


def _visible_lets(path: str, text: str, open_docs: Mapping[str, str] | None) -> list[tuple[str, str]]:
    """(name, file) of the lets of the buffer and of the files it imports."""
    out = [(name, path) for name, _, _, _ in _full(text).lets]
    for file, _, lets in _imported_outlines(path, text, open_docs):
        out += [(name, file) for name, _, _, _ in lets]
    return out


def _imported_outlines(
    path: str, text: str, open_docs: Mapping[str, str] | None
) -> list[tuple[str, str, list[tuple[str, int, int, int]]]]:
    """(path, text, lets) of each file the buffer imports, transitively, once each."""
    seen = {os.path.realpath(path)}
    out = []
    queue = [(path, text, 0)]
    while queue:
        file, body, depth = queue.pop(0)
        if depth >= _MAX_IMPORT_DEPTH:
            continue
        for rel, _, _ in _full(body).imports:
            target = os.path.normpath(os.path.join(os.path.dirname(file), rel))
            if os.path.realpath(target) in seen:
                continue
            seen.add(os.path.realpath(target))
            inner = _read(target, open_docs)
            if inner is None:
                continue
            out.append((target, inner, _full(inner).lets))
            queue.append((target, inner, depth + 1))
    return out


def _import_items(path: str) -> list[Completion]:
    base = os.path.dirname(os.path.abspath(path))
    items = []
    for root, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("node_modules", "results"))
        if root.count(os.sep) - base.count(os.sep) >= 2:
            dirs[:] = []
        for f in sorted(files):
            full = os.path.join(root, f)
            if f.endswith(".acx") and os.path.realpath(full) != os.path.realpath(path):
                items.append(Completion(os.path.relpath(full, base), "import", "import a .acx file"))
        if len(items) >= 200:
            break
    return items


# ---- hover --------------------------------------------------------------------------------------


def hover(
    path: str,
    text: str,
    line: int,
    col: int,
    open_docs: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> str | None:
    """Markdown for the cursor: a key's type, default and description; a component's description;
    on a value, what it resolves to and where it came from (``acx explain``)."""
    offset = offset_of(text, line, col)
    ctx = _context(text, offset)
    out = ctx.before
    doc_kind = _document_kind(out, text)
    is_key = ctx.word and out.expect == "stmt" and _followed_by(text, ctx.word_end, "=")
    if is_key:
        return _key_hover(out.frames, ctx.word, doc_kind)
    if out.expect == "label" and out.key in _COMPONENT_KINDS and ctx.word:
        return _component_hover(out.key, ctx.word)
    if out.expect == "stmt" and ctx.word and _followed_by(text, ctx.word_end, "{", name_between=True):
        return _key_hover(out.frames, ctx.word, doc_kind)
    if out.expect == "value" and (ctx.word or ctx.token is not None):
        word = ctx.word if ctx.token is None or ctx.token.kind == "name" else ""
        return _value_hover(path, text, line, open_docs, cwd, word, out.key)
    return None


def _followed_by(text: str, offset: int, what: str, *, name_between: bool = False) -> bool:
    rest = text[offset : offset + 400].lstrip()
    if name_between:
        m = re.match(r'(?:[A-Za-z_][\w-]*|"(?:[^"\\\n]|\\.)*")?\s*', rest)
        rest = rest[m.end() :] if m else rest
    return rest.startswith(what) and not rest.startswith("==")


def _key_hover(frames: list[Frame], word: str, doc_kind: str) -> str | None:
    node, root, component = _node_at(frames, doc_kind)
    if node is None:
        return None
    if component is not None:
        rows = _config_docs(component)
        for name in (word, word + "_seconds", word + "_mb"):
            row = rows.get(name)
            if row is not None:
                return _row_text(row, f"`acx config docs {component.replace(':', ' ')}`")
    found = _prop_for(_properties(node, root), word)
    if found is None:
        return None
    name, sub = found
    sub = _deref(sub, root)
    lines = [f"**{name}**: `{_type_of(sub, root)}`"]
    if name != word:
        lines.append(f"`{word} = …` with a {'duration' if name.endswith('_seconds') else 'size'} sets `{name}`")
    if isinstance(sub, dict) and "default" in sub:
        import json

        lines.append(f"default: `{json.dumps(sub['default'])}`")
    if isinstance(sub, dict) and sub.get("description"):
        lines.append(str(sub["description"]))
    return "\n\n".join(lines)


def _config_docs(component: str) -> dict[str, dict[str, str]]:
    """``acx config docs KIND ID``'s rows by field (empty for an unknown id)."""
    from acx.cli import component_field_rows

    kind, cid = component.split(":", 1)
    try:
        return {r["field"]: r for r in component_field_rows(kind, cid)}
    except AcxUserError:
        return {}


def _row_text(row: Mapping[str, str], source: str) -> str:
    return f"**{row['field']}**: `{row['type']}`\n\ndefault: `{row['default']}`\n\n{row['description']}\n\n*{source}*"


def _component_hover(kind: str, cid: str) -> str | None:
    from acx.components import registry

    info = registry(kind).get(cid)
    if info is None:
        return None
    return f"**{kind} {cid}** ({info.origin})\n\n{info.description}\n\n*`acx config docs {kind} {cid}`*"


def _value_hover(
    path: str, text: str, line: int, open_docs: Mapping[str, str] | None, cwd: str | None, word: str, key: str | None
) -> str | None:
    parts = []
    if word:
        for name, where, value in _let_values(path, text, open_docs):
            if name == word:
                parts.append(f"`let {name} = {_mask(value, name, key)}`  ({os.path.basename(where)})")
                break
    explained = _explain_line(path, text, line, open_docs, cwd or os.getcwd())
    if explained:
        parts.append(explained)
    return "\n\n".join(parts) or None


def _let_values(path: str, text: str, open_docs: Mapping[str, str] | None) -> Iterator[tuple[str, str, str]]:
    files = [(path, text), *((f, t) for f, t, _ in _imported_outlines(path, text, open_docs))]
    for file, body in files:
        for name, _, end, _ in _full(body).lets:
            rest = body[end:].split("\n", 1)[0].strip()
            value = rest[1:].strip() if rest.startswith("=") else rest
            yield name, file, value


def _mask(value: str, name: str, key: str | None) -> str:
    """A let's text as shown in hover: references (``secret("X")``, ``env("X")``, ``${X}``) as
    written; a literal that is, or sits at, a secret (a sensitive key, a secret-looking name or
    value, a URL with a password) is never shown."""
    from acx.secrets import holds_url_credentials, is_secret_name, is_secret_value, is_sensitive_key

    reference = re.fullmatch(r'(?:secret|env)\("[^"]*"\)|"\$\{[^}]*\}"', value.strip()) is not None
    secret = (key is not None and is_sensitive_key(key)) or is_secret_name(name) or is_secret_value(value.strip('"'))
    if not reference and (secret or holds_url_credentials(value)):
        return "<secret value hidden>"
    return value if len(value) <= 120 else value[:117] + "..."


def _explain_line(path: str, text: str, line: int, open_docs: Mapping[str, str] | None, cwd: str) -> str | None:
    """``acx explain`` for every resolved field a contribution on ``line`` of ``path`` fed."""
    from acx.cli import render_explain as render_text
    from acx.compiler import compile_orchestration, explain_field
    from acx.grammar import source_overlay

    environ = dict(os.environ)
    compiled = None
    for _ in range(2):
        try:
            with source_overlay({**(open_docs or {}), path: text}):
                compiled = compile_orchestration(path, cwd=cwd, environ=environ)
            break
        except AcxUserError as exc:
            # The editor's environment often lacks the run's variables: show them as unset
            # (`acx explain` would stop at E0302) rather than show nothing.
            unset = [m.group(1) for d in exc.diagnostics if d.code == "E0302" for m in [_UNSET.search(d.message)] if m]
            if not unset:
                return None
            environ.update({name: f"<{name} unset>" for name in unset})
    if compiled is None:
        return None
    me = os.path.realpath(path)
    shown: list[str] = []
    for request, table in compiled.provenance.items():
        fields = [f for f, chain in table.items() if any(_at(c.source, me, line + 1, cwd) for c in chain)]
        if not fields:
            continue
        explained = [e for f in fields for e in explain_field(compiled, request, f)]
        shown.append(render_text(request, explained).rstrip())
        if len(shown) >= 3:
            break
    if not shown:
        return None
    more = len(compiled.provenance) - len(shown)
    tail = f"\n\n(and {more} more request{'s' if more != 1 else ''})" if more > 0 and len(shown) >= 3 else ""
    return "```\n" + "\n".join(shown) + "\n```" + tail


def _at(source: str, real: str, line: int, cwd: str) -> bool:
    parts = source.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    return int(parts[1]) == line and os.path.realpath(os.path.join(cwd, parts[0])) == real


# ---- definition, symbols, rename ----------------------------------------------------------------


def definition(path: str, text: str, line: int, col: int, open_docs: Mapping[str, str] | None = None) -> list[Location]:
    """Where the let, import or recipe at the cursor is defined."""
    offset = offset_of(text, line, col)
    full = _full(text)
    for rel, start, end in full.imports:
        if start <= offset <= end:
            target = os.path.normpath(os.path.join(os.path.dirname(path), rel))
            return [Location(target, 0, 0, 0, 0)] if _read(target, open_docs) is not None else []
    ctx = _context(text, offset)
    word = ctx.word
    if ctx.token is not None and ctx.token.kind == "str":
        inner = re.search(r"\$\{([^}]*)\}", ctx.token.text)
        word = inner.group(1) if inner and not word else word
    if not word:
        return []
    files = [(path, text), *((f, t) for f, t, _ in _imported_outlines(path, text, open_docs))]
    for file, body in files:
        o = full if file == path else _full(body)
        lets = [(s, e) for name, s, e, _ in o.lets if name == word]
        if lets:
            return [_location(file, body, s, e) for s, e in lets[:1]]
        recipes = [b for b in o.blocks if b.kind == "recipe" and b.label == word]
        if recipes:
            return [_location(file, body, recipes[0].name_start, recipes[0].name_end)]
    return _builtin_recipe(word)


def _builtin_recipe(name: str) -> list[Location]:
    """A built-in declarative recipe (``acx.stdlib_recipes/*.acx``) named ``name``."""
    from importlib.resources import files

    for entry in sorted(files("acx.stdlib_recipes").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".acx"):
            continue
        body = entry.read_text(encoding="utf-8")
        for b in _full(body).blocks:
            if b.kind == "recipe" and b.label == name:
                return [_location(str(entry), body, b.name_start, b.name_end)]
    return []


def document_symbols(path: str, text: str) -> list[Symbol]:
    """The outline: orchestrations and the runs in them, recipes, lets."""
    full = _full(text)
    symbols: list[tuple[int, Symbol]] = []
    for b in sorted(full.blocks, key=lambda b: b.start):
        if b.kind not in ("orchestration", "run", "recipe"):
            continue
        name = b.label or b.kind
        symbols.append(
            (
                b.start,
                Symbol(
                    f"{b.kind} {name}",
                    b.kind,
                    _location(path, text, b.start, b.end),
                    _location(path, text, b.name_start, b.name_end),
                ),
            )
        )
    for name, s, e, _ in full.lets:
        loc = _location(path, text, s, e)
        symbols.append((s, Symbol(name, "let", loc, loc)))
    return [s for _, s in sorted(symbols, key=lambda x: x[0])]


def rename_let(
    path: str, text: str, line: int, col: int, new_name: str, open_docs: Mapping[str, str] | None = None
) -> dict[str, list[TextEdit]]:
    """Edits renaming the let at the cursor (its definition and every use in the buffer)."""
    from acx.grammar import parse

    if not _NAME.fullmatch(new_name) or new_name in _KEYWORDS:
        raise AcxUserError(
            f"`{new_name}` is not a valid let name",
            code="E0671",
            path="rename",
            help="a name is letters, digits and _ (inner -), not starting with a digit, and not a keyword",
        )
    offset = offset_of(text, line, col)
    ctx = _context(text, offset)
    targets = definition(path, text, line, col, open_docs)
    module = parse(text, path)  # AcxSyntaxError: rename needs a buffer that parses
    if not ctx.word or not targets or not _is_let(targets[0], ctx.word, open_docs, path, text):
        raise AcxUserError(
            f"`{ctx.word or text[offset : offset + 1]}` is not a let name",
            code="E0671",
            span=Span(path, line + 1, col + 1),
            help="rename works on `let` names: put the cursor on a let or on a use of it",
        )
    old = ctx.word
    if old in _loop_vars(module):
        raise AcxUserError(
            f"`{old}` is also a for-loop variable in this file; renaming would be ambiguous",
            code="E0671",
            span=Span(path, line + 1, col + 1),
            help="rename the loop variable by hand first",
        )
    edits: dict[str, list[TextEdit]] = {}
    for span in _uses(module, old):
        loc = Location(path, span.line - 1, span.col - 1, (span.end_line or span.line) - 1, (span.end_col or 1) - 1)
        edits.setdefault(path, []).append(TextEdit(loc, new_name))
    target = targets[0]
    if os.path.realpath(target.path) != os.path.realpath(path):
        edits.setdefault(target.path, []).append(TextEdit(target, new_name))
    return edits


def _is_let(loc: Location, word: str, open_docs: Mapping[str, str] | None, path: str, text: str) -> bool:
    body = text if os.path.realpath(loc.path) == os.path.realpath(path) else _read(loc.path, open_docs) or ""
    return any(n == word for n, _, _, _ in _full(body).lets)


def _loop_vars(module: Any) -> set[str]:
    from acx.grammar import syntax as A

    names: set[str] = set()

    def walk(stmts: Any) -> None:
        for s in stmts or ():
            if isinstance(s, A.For):
                names.add(s.var.value)
                walk(s.body)
            elif isinstance(s, A.Block):
                walk(s.body)

    walk(module.body)
    return names


def _uses(module: Any, name: str) -> list[Span]:
    """Spans of the let ``name``'s definition, bare uses and ``${name}`` interpolations."""
    from acx.grammar import syntax as A

    spans: list[Span] = []

    def value(v: Any) -> None:
        if isinstance(v, A.Ref) and v.name == name:
            spans.append(v.span)
        elif isinstance(v, A.Str):
            spans.extend(p.span for p in v.parts if isinstance(p, A.Interp) and p.name == name)
        elif isinstance(v, A.ListV):
            for item in v.items:
                value(item)
        elif isinstance(v, A.Call):
            for arg in v.args:
                value(arg)
        elif isinstance(v, A.MapV):
            stmts(v.body)

    def stmts(body: Any) -> None:
        for s in body or ():
            if isinstance(s, A.Let):
                if s.name.value == name:
                    spans.append(s.name.span)
                value(s.value)
            elif isinstance(s, A.Assign):
                value(s.value)
            elif isinstance(s, A.For):
                value(s.iterable)
                stmts(s.body)
            elif isinstance(s, A.Block):
                if isinstance(s.label, A.Str):
                    value(s.label)
                stmts(s.body)

    stmts(module.body)
    return [_name_only(s, name) for s in spans]


def _name_only(span: Span, name: str) -> Span:
    """An interpolation's span covers ``${name}``; the edit replaces the name alone."""
    if span.end_col is not None and span.end_line == span.line and span.end_col - span.col == len(name) + 3:
        return Span(span.file, span.line, span.col + 2, span.line, span.col + 2 + len(name))
    if span.end_col is None:
        return Span(span.file, span.line, span.col, span.line, span.col + len(name))
    return span
