"""YAML/JSON front end: a config or orchestration file → :class:`SourceDoc` with a span per value.

ruamel.yaml lives here and nowhere else in the compiler. We *compose* the document (node graph
with marks) instead of constructing it, so every mapping key and every value keeps its
``file:line:col`` and duplicate keys can be reported with both locations — the stock
constructors either raise without the first location or silently keep one value.

``.json`` files go through the same path (JSON is YAML 1.2 flow syntax), after ``json.loads``
has had the chance to report a JSON-specific syntax error.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from acx.compiler._source import DocKind, Path_, SourceDoc
from acx.diagnostics import Diagnostic, Related, Span, not_utf8
from acx.errors import AcxConfigError
from acx.inputs import (
    MAX_EXPANDED_NODES,
    MAX_INT_DIGITS,
    MAX_NESTING_DEPTH,
    InputFileError,
    input_file_error,
    read_regular_file,
)

if TYPE_CHECKING:
    from ruamel.yaml.nodes import Node

__all__ = ["detect_kind", "kind_mismatch_error", "load_yaml_document", "parse_yaml_text", "read_text"]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_INT_TAG = "tag:yaml.org,2002:int"
_PLAIN_TAGS = frozenset("tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null"))

_SURROGATE = re.compile("[\ud800-\udfff]")
_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")

#: Keys only an orchestration file has; a run config has none of them.
_ORCHESTRATION_MARKERS = ("version", "requests", "defaults")


def read_text(path: str) -> str:
    """The file's text, or an AcxConfigError saying why it cannot be read."""
    try:
        data = read_regular_file(path)
    except FileNotFoundError:
        raise AcxConfigError(
            f"file not found: {path}",
            code="E0209",
            path=path,
            help="check the path (relative paths start at the working directory)",
        ) from None
    except InputFileError as exc:
        raise input_file_error(AcxConfigError, exc) from None
    except OSError as exc:
        raise AcxConfigError(f"cannot read {path}: {exc.strerror}", code="E0215", path=path) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(AcxConfigError, "E0215", data, exc.start, path) from None


def _join_pair(m: re.Match[str]) -> str:
    pair = m.group()
    high, low = pair[0], pair[1]
    return chr(0x10000 + ((ord(high) - 0xD800) << 10) + (ord(low) - 0xDC00))


def detect_kind(data: Any) -> DocKind:
    """``orchestration`` when the mapping has ``version``/``requests``/``defaults``, else ``run_config``."""
    if isinstance(data, dict) and any(k in data for k in _ORCHESTRATION_MARKERS):
        return "orchestration"
    return "run_config"


def kind_mismatch_error(doc: SourceDoc, expected: DocKind) -> AcxConfigError:
    span = doc.span_of(())
    if expected == "run_config":
        return AcxConfigError(
            f"{doc.path} is an orchestration file (it has `version`/`requests`), not a config file",
            code="E0210",
            span=span,
            help="pass an orchestration as the SPEC argument; --config takes run config files "
            "(runtime, execution, benchmarks, harnesses, environments)",
        )
    return AcxConfigError(
        f"{doc.path} is a run config file, not an orchestration: it has no `version` or `requests`",
        code="E0210",
        span=span,
        help="add `version: 1` and a `requests:` list, or pass this file with --config",
    )


def load_yaml_document(path: str, *, expected: DocKind | None = None) -> SourceDoc:
    """Load a YAML or JSON file. ``expected`` (if given) must match the detected kind."""
    text = read_text(path)
    doc = parse_yaml_text(text, path)
    if expected is not None and doc.kind != expected:
        raise kind_mismatch_error(doc, expected)
    return doc


def parse_yaml_text(text: str, path: str) -> SourceDoc:
    """Parse ``text`` (named ``path`` in diagnostics) into a SourceDoc."""
    if path.endswith(".json"):
        _check_json(text, path)
    builder = _Builder(path)
    root = _compose(text, path)
    data: Any = {} if root is None else builder.build(root, ())
    if builder.diagnostics:
        raise AcxConfigError(diagnostics=builder.diagnostics)
    if not isinstance(data, dict):
        raise AcxConfigError(
            f"expected a mapping at the top level of {path}, got {_kind_name(data)}",
            code="E0210",
            span=builder.locs.get(()),
            help="a config or orchestration file is a mapping of keys (`runtime:`, `requests:`, ...)",
        )
    return SourceDoc(
        path=path,
        kind=detect_kind(data),
        data=data,
        locs=builder.locs,
        key_locs=builder.key_locs,
        text=text,
    )


def _check_json(text: str, path: str) -> None:
    try:
        json.loads(text)
    except (RecursionError, MemoryError):
        return  # too deep for the JSON module: the YAML pass reports the depth limit with its place
    except json.JSONDecodeError as exc:
        raise AcxConfigError(
            f"JSON syntax error: {exc.msg}",
            code="E0201",
            span=Span(path, exc.lineno, exc.colno),
            help="fix the JSON syntax at this position (trailing commas and comments are not JSON)",
        ) from None
    except ValueError:
        return  # an integer too long to convert: the YAML pass reports it with its place


def _compose(text: str, path: str) -> Node | None:
    from ruamel.yaml import YAML
    from ruamel.yaml.composer import MaxDepthExceededError
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    yaml = YAML(typ="safe", pure=True)
    yaml.max_depth = MAX_NESTING_DEPTH  # the composer recurses per level: stop long before Python does
    try:
        node = yaml.compose(text)
    except MaxDepthExceededError as exc:
        mark = exc.problem_mark
        raise AcxConfigError(
            f"lists and mappings nest more than {MAX_NESTING_DEPTH} levels deep",
            code="E0219",
            span=Span(path, mark.line + 1, mark.column + 1) if mark is not None else Span(path, 1, 1),
            help=f"the nesting limit is {MAX_NESTING_DEPTH} levels (docs/errors.md#E0219); flatten the structure",
        ) from None
    except MarkedYAMLError as exc:
        raise _syntax_error(exc, path) from None
    except YAMLError as exc:  # unmarked: rare (reader errors)
        raise AcxConfigError(f"YAML error: {exc}", code="E0201", span=Span(path, 1, 1)) from None
    if node is not None:
        _check_expansion(node, path)
    return node  # type: ignore[no-any-return]


def _check_expansion(root: Node, path: str) -> None:
    """Refuse a recursive alias (a node that contains itself) and an alias bomb (aliases that
    expand past MAX_EXPANDED_NODES values), before anything is expanded: sizes are counted once
    per distinct node, so the check costs the size of the text, not of the expansion."""
    from ruamel.yaml.nodes import CollectionNode

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Node) -> int:
        key = id(node)
        known = sizes.get(key)
        if known is not None:
            return known
        if not isinstance(node, CollectionNode):
            return 1
        if key in open_nodes:
            anchor = f" `&{node.anchor}`" if getattr(node, "anchor", None) else ""
            raise AcxConfigError(
                f"recursive alias: the node anchored here{anchor} contains an alias of itself",
                code="E0219",
                span=_mark_span(path, node),
                help="an alias may only refer to a node that is complete; remove the self-reference",
            )
        open_nodes.add(key)
        total = 1
        for item in node.value:
            for part in item if isinstance(item, tuple) else (item,):
                total += size(part)
                if total > MAX_EXPANDED_NODES:
                    raise AcxConfigError(
                        f"this document has more than {MAX_EXPANDED_NODES:,} values (aliases and merge keys "
                        "counted as expanded)",
                        code="E0219",
                        span=_mark_span(path, part),
                        help=f"a document expands to at most {MAX_EXPANDED_NODES:,} values (docs/errors.md#E0219); "
                        "repeat less through aliases and merge keys",
                    )
        open_nodes.discard(key)
        sizes[key] = total
        return total

    size(root)


def _mark_span(path: str, node: Node) -> Span:
    mark = node.start_mark
    return Span(path, mark.line + 1, mark.column + 1)


def _syntax_error(exc: Any, path: str) -> AcxConfigError:
    mark = exc.problem_mark or exc.context_mark
    span = Span(path, mark.line + 1, mark.column + 1) if mark is not None else Span(path, 1, 1)
    problem = (exc.problem or exc.context or "invalid YAML").strip()
    related: tuple[Related, ...] = ()
    if exc.context and exc.context_mark is not None and exc.problem_mark is not None:
        ctx = exc.context_mark
        related = (Related(Span(path, ctx.line + 1, ctx.column + 1), exc.context.strip()),)
    diag = Diagnostic(
        code="E0201",
        message=f"YAML syntax error: {problem}",
        span=span,
        help=_syntax_help(problem, (exc.context or "").strip()),
        related=related,
    )
    return AcxConfigError(diagnostics=[diag])


def _syntax_help(problem: str, context: str = "") -> str:
    if "flow mapping" in context or "flow sequence" in context:
        opening, closing = ("{", "}") if "mapping" in context else ("[", "]")
        return f"close the {opening} opened at the note's position with `{closing}` (or separate items with `,`)"
    if "tab" in problem:
        return "indent with spaces, not tabs"
    if "mapping values are not allowed" in problem:
        return "quote a value that contains `: `, or fix the indentation of this line"
    if "another document" in problem:
        return "a config or orchestration file holds exactly one YAML document; remove the `---`"
    if "could not find expected ':'" in problem or "simple key" in problem:
        return "each mapping entry is `key: value`; check the line above for a missing `:` or quote"
    return "fix the YAML syntax at this position (check indentation, quotes and brackets)"


def _kind_name(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing"
    return f"a {type(value).__name__}"


class _Builder:
    """Turns a composed node graph into plain data plus value/key spans."""

    def __init__(self, path: str) -> None:
        from ruamel.yaml import YAML

        self.path = path
        self.locs: dict[Path_, Span] = {}
        self.key_locs: dict[Path_, Span] = {}
        self.diagnostics: list[Diagnostic] = []
        self._constructor = YAML(typ="safe", pure=True).constructor

    def span(self, node: Node) -> Span:
        s, e = node.start_mark, node.end_mark
        return Span(self.path, s.line + 1, s.column + 1, e.line + 1, e.column + 1)

    def build(self, node: Node, path: Path_) -> Any:
        from ruamel.yaml.nodes import MappingNode, SequenceNode

        self.locs[path] = self.span(node)
        if isinstance(node, MappingNode):
            if node.tag != _MAP_TAG:
                self.unsupported_tag(node)
            return self._mapping(node, path)
        if isinstance(node, SequenceNode):
            if node.tag != _SEQ_TAG:
                self.unsupported_tag(node)
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return self._scalar(node)

    def unsupported_tag(self, node: Node) -> None:
        self.diagnostics.append(
            Diagnostic(
                code="E0201",
                message=f"unsupported YAML tag `{node.tag}`",
                span=self.span(node),
                help="remove the tag: use plain strings, numbers, booleans, null, lists and mappings",
            )
        )

    def _scalar(self, node: Node) -> Any:
        if node.tag == _TIMESTAMP_TAG:
            # Dates are strings to acx; no config field is a timestamp.
            return str(node.value)
        if node.tag not in _PLAIN_TAGS:
            self.unsupported_tag(node)
            return None
        if node.tag == _INT_TAG and len(str(node.value)) > MAX_INT_DIGITS:
            self.diagnostics.append(
                Diagnostic(
                    code="E0219",
                    message=f"an integer of {len(str(node.value)):,} characters (the limit is {MAX_INT_DIGITS} digits)",
                    span=self.span(node),
                    help="no acx field takes a number this large; quote it if it is meant as text",
                )
            )
            return None
        value = self._constructor.construct_object(node, deep=True)
        if isinstance(value, str):
            return self.text(value, node)
        return value

    def text(self, value: str, node: Node) -> str:
        """``value`` with UTF-16 surrogate pairs joined; a lone surrogate is an error (E0201)."""
        if not _SURROGATE.search(value):
            return value
        # JSON writes astral characters as `\uD83D\uDE00`, and the YAML reader keeps the two
        # halves: join the pairs; what is left is a lone surrogate, which is no character.
        joined = _PAIR.sub(_join_pair, value)
        lone = _SURROGATE.search(joined)
        if lone is None:
            return joined
        self.diagnostics.append(
            Diagnostic(
                code="E0201",
                message=f"invalid string: `\\u{ord(lone.group()):04x}` is a lone UTF-16 surrogate, not a character",
                span=self.span(node),
                help="write the character itself, or a high+low surrogate pair (e.g. \\ud83d\\ude00)",
            )
        )
        return joined

    def _mapping(self, node: Node, path: Path_) -> dict[str, Any]:
        from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

        out: dict[str, Any] = {}
        first_seen: dict[str, Span] = {}
        # `<<: *anchor` fills keys the mapping does not set itself (YAML merge-key semantics):
        # build the merged sources first so explicit keys (and their spans) win.
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                continue
            sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            for source in sources:
                if not isinstance(source, MappingNode):
                    self.diagnostics.append(
                        Diagnostic(code="E0201", message="`<<` must merge a mapping", span=self.span(source))
                    )
                    continue
                for key, value in self._mapping(source, path).items():
                    out.setdefault(key, value)
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            if not isinstance(key_node, ScalarNode):
                self.diagnostics.append(
                    Diagnostic(
                        code="E0201",
                        message="mapping keys must be plain scalars",
                        span=self.span(key_node),
                        help="write keys as plain words or quoted strings",
                    )
                )
                continue
            key = self.text(str(key_node.value), key_node)
            key_span = self.span(key_node)
            if key in first_seen:
                self.diagnostics.append(
                    Diagnostic(
                        code="E0202",
                        message=f"duplicate key `{key}`",
                        span=key_span,
                        help="remove one of the two entries (YAML keeps only one of them)",
                        related=(Related(first_seen[key], "first defined here"),),
                    )
                )
                continue
            first_seen[key] = key_span
            self.key_locs[(*path, key)] = key_span
            out[key] = self.build(value_node, (*path, key))
        return out
