"""The TextMate grammar (editors/vscode/syntaxes/acx.tmLanguage.json), run by vscode-textmate +
vscode-oniguruma under Node exactly as VS Code runs it (issue 27).

* golden tokenizations of every example ``.acx`` file, the built-in recipes and the fixtures
  (``ACX_UPDATE_GOLDEN=1`` rewrites them);
* the grammar agrees with the parser: every character of every token lark produces from
  ``src/acx/grammar/acx.lark`` carries the scope its role calls for (a key, a section kind, a
  component id, a reference, a call, a literal, …), and no file that parses has an ``invalid``
  scope;
* every keyword of acx.lark (derived from the lark file) is highlighted as one;
* the lexical mistakes of ``tests/grammar/golden`` (E0102/E0104/E0105/E0107/E0108/E0115) are
  marked ``invalid`` where ``acx check`` reports them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from lark import Lark, Token, Tree
from lark.exceptions import LarkError

from .conftest import REPO, Tokenize, run_tokenizer

LARK_FILE = REPO / "src" / "acx" / "grammar" / "acx.lark"
GOLDEN_DIR = Path(__file__).parent / "golden"
FIXTURES = Path(__file__).parent / "fixtures"
GRAMMAR_GOLDEN = REPO / "tests" / "grammar" / "golden"


def _acx_files() -> list[Path]:
    examples = [p for p in REPO.glob("examples/**/*.acx") if "results" not in p.relative_to(REPO).parts]
    recipes = list((REPO / "src" / "acx" / "stdlib_recipes").glob("*.acx"))
    return sorted(examples) + sorted(recipes) + sorted(FIXTURES.glob("*.acx"))


GOLDEN_INPUTS = _acx_files()
# Files that must tokenize without an `invalid` scope and agree with the parser token by token.
VALID_INPUTS = [p for p in GOLDEN_INPUTS if p.name != "invalid.acx"]


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _golden_path(path: Path) -> Path:
    return GOLDEN_DIR / (_rel(path).replace("/", "__") + ".tokens")


def _lines(path: Path) -> list[str]:
    # Split as tokenize.js does (\r\n or \n), so line numbers and columns agree.
    return re.split(r"\r\n|\n", path.read_text(encoding="utf-8"))


def _utf16_to_index(line: str) -> list[int]:
    """Map a UTF-16 offset (what vscode-textmate reports) to a str index (what lark reports)."""
    table: list[int] = []
    for index, ch in enumerate(line):
        table.extend([index] * (2 if ord(ch) > 0xFFFF else 1))
    table.append(len(line))
    return table


def _chars(path: Path, tokens: list[list[dict]]) -> Iterator[tuple[int, int, str, list[str]]]:
    """Every character the grammar tokenized: (line, col) 1-based, the character, its scopes."""
    for lineno, (line, line_tokens) in enumerate(zip(_lines(path), tokens, strict=True), start=1):
        to_index = _utf16_to_index(line)
        for tok in line_tokens:
            for col0 in range(to_index[tok["start"]], to_index[tok["end"]]):
                yield lineno, col0 + 1, line[col0], tok["scopes"]


def render(path: Path, tokens: list[list[dict]]) -> str:
    """The golden text: each source line, then its non-blank tokens with their scopes."""
    out = [f"# {_rel(path)}: TextMate tokens (scope source.acx omitted); ACX_UPDATE_GOLDEN=1 rewrites"]
    for lineno, (line, line_tokens) in enumerate(zip(_lines(path), tokens, strict=True), start=1):
        out.append(f"{lineno:4} | {line}".rstrip())
        to_index = _utf16_to_index(line)
        for tok in line_tokens:
            start, end = to_index[tok["start"]], to_index[tok["end"]]
            text = line[start:end]
            if text.strip():
                scopes = " ".join(tok["scopes"][1:])
                out.append(f"       {start}-{end} {json.dumps(text, ensure_ascii=False)}  {scopes}")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def tokens(tokenize: Tokenize) -> dict[Path, list[list[dict]]]:
    return tokenize(GOLDEN_INPUTS)


def test_every_regex_compiles_in_oniguruma(node: str) -> None:
    run_tokenizer(node, [], check=True)


@pytest.mark.parametrize("path", GOLDEN_INPUTS, ids=_rel)
def test_golden_tokenization(path: Path, tokens: dict[Path, list[list[dict]]]) -> None:
    actual = render(path, tokens[path])
    golden = _golden_path(path)
    if os.environ.get("ACX_UPDATE_GOLDEN") == "1":
        golden.write_text(actual, encoding="utf-8")
        return
    assert golden.is_file(), f"no golden file {golden.name}: run with ACX_UPDATE_GOLDEN=1 and review it"
    assert actual == golden.read_text(encoding="utf-8"), f"tokens of {_rel(path)} changed (ACX_UPDATE_GOLDEN=1)"


def test_no_stale_golden_files() -> None:
    expected = {_golden_path(p).name for p in GOLDEN_INPUTS}
    present = {p.name for p in GOLDEN_DIR.glob("*.tokens")}
    assert present - expected == set(), "golden files for inputs that no longer exist"
    assert expected - present == set() or os.environ.get("ACX_UPDATE_GOLDEN") == "1"


def test_every_example_has_a_golden_file() -> None:
    examples = {p for p in GOLDEN_INPUTS if _rel(p).startswith("examples/")}
    assert len(examples) >= 8, "the examples/ glob found too few .acx files"
    assert {p for p in examples if _golden_path(p).is_file()} == examples


# -- the grammar agrees with the parser ----------------------------------------------------------


# Comments are %ignore'd: the parser hands them to this list instead (reset before each parse).
_COMMENTS: list[Token] = []


@pytest.fixture(scope="module")
def lark_parser() -> Lark:
    return Lark(
        LARK_FILE.read_text(encoding="utf-8"),
        parser="lalr",
        lexer="contextual",
        maybe_placeholders=False,
        keep_all_tokens=True,
        lexer_callbacks={"COMMENT": _COMMENTS.append},
    )


# The scope a token must carry, by the rule it sits in and its terminal; `None` as the rule is
# any rule. Full-match patterns against one scope of the token's stack.
ROLE_SCOPES: dict[tuple[str | None, str], str] = {
    ("import_stmt", "IMPORT"): r"keyword\.control\.import\.acx",
    ("let_stmt", "LET"): r"storage\.type\.let\.acx",
    ("let_stmt", "NAME"): r"variable\.other\.constant\.acx",
    ("for_stmt", "FOR"): r"keyword\.control\.loop\.for\.acx",
    ("for_stmt", "NAME"): r"variable\.parameter\.loop\.acx",
    ("for_stmt", "IN"): r"keyword\.control\.loop\.in\.acx",
    ("bare_key", "NAME"): r"variable\.other\.property\.acx",
    ("block", "NAME"): r"entity\.name\.type\.section\.acx",
    ("short_block", "NAME"): r"entity\.name\.type\.section\.acx",
    ("name_label", "NAME"): r"entity\.name\.tag\.label\.acx",
    ("ref", "NAME"): r"variable\.other\.acx",
    ("call", "NAME"): r"support\.function\.acx",
    ("call", "LPAR"): r"punctuation\.section\.arguments\.begin\.acx",
    ("call", "RPAR"): r"punctuation\.section\.arguments\.end\.acx",
    ("string", "STRING"): r"string\.quoted\.double\.acx",
    ("string", "MLSTRING"): r"string\.quoted\.triple\.acx",
    ("number", "NUMBER"): r"constant\.numeric\.(integer|float)\.acx",
    ("duration", "DURATION"): r"constant\.numeric\.duration\.acx",
    ("size", "SIZE"): r"constant\.numeric\.size\.acx",
    ("true", "TRUE"): r"constant\.language\.boolean\.true\.acx",
    ("false", "FALSE"): r"constant\.language\.boolean\.false\.acx",
    ("null", "NULL"): r"constant\.language\.null\.acx",
    (None, "EQUAL"): r"keyword\.operator\.assignment\.acx",
    (None, "LBRACE"): r"punctuation\.section\.block\.begin\.acx",
    (None, "RBRACE"): r"punctuation\.section\.block\.end\.acx",
    (None, "LSQB"): r"punctuation\.section\.list\.begin\.acx",
    (None, "RSQB"): r"punctuation\.section\.list\.end\.acx",
    (None, "COMMA"): r"punctuation\.separator\.comma\.acx",
    (None, "SEMICOLON"): r"punctuation\.terminator\.statement\.acx",
    (None, "COMMENT"): r"comment\.line\.(number-sign|double-slash)\.acx",
}
BUILTIN_CALLS = {"env", "secret"}


def _expected_scope(rule: str, token: Token, inside: tuple[str, ...]) -> str:
    if rule == "call" and token.type == "NAME" and token.value in BUILTIN_CALLS:
        return rf"support\.function\.builtin\.{token.value}\.acx"
    if rule == "string" and "quoted_key" in inside[-1:]:
        return r"meta\.property-name\.acx"
    pattern = ROLE_SCOPES.get((rule, token.type)) or ROLE_SCOPES.get((None, token.type))
    assert pattern is not None, f"no expected scope for {token.type} in rule {rule}: add it to ROLE_SCOPES"
    return pattern


def _roles(tree: Tree, inside: tuple[str, ...] = ()) -> Iterator[tuple[Token, str]]:
    rule = str(tree.data)
    for child in tree.children:
        if isinstance(child, Tree):
            yield from _roles(child, (*inside, rule))
        else:
            assert isinstance(child, Token)
            yield child, _expected_scope(rule, child, inside)


def _token_chars(token: Token) -> Iterator[tuple[int, int]]:
    """The (line, col) of each non-newline character of a token (multi-line strings span lines)."""
    line, col = token.line, token.column
    assert line is not None and col is not None
    for ch in token.value:
        if ch == "\n":
            line, col = line + 1, 1
            continue
        yield line, col
        col += 1


def _parse_roles(parser: Lark, path: Path) -> dict[tuple[int, int], tuple[str, Token]]:
    _COMMENTS.clear()
    tree = parser.parse(path.read_text(encoding="utf-8"))
    roles = list(_roles(tree))
    roles += [(c, _expected_scope("", c, ())) for c in _COMMENTS]
    return {pos: (pattern, token) for token, pattern in roles for pos in _token_chars(token)}


def _agreement_problems(parser: Lark, path: Path, line_tokens: list[list[dict]]) -> list[str]:
    expected = _parse_roles(parser, path)
    problems = []
    for line, col, ch, scopes in _chars(path, line_tokens):
        where = f"{_rel(path)}:{line}:{col} {ch!r}"
        invalid = [s for s in scopes if s.startswith("invalid")]
        if invalid:
            problems.append(f"{where}: {invalid[0]} in a file that parses")
        if (line, col) not in expected:
            if not ch.isspace():
                problems.append(f"{where}: not part of any token the parser read")
            continue
        pattern, token = expected[(line, col)]
        if not any(re.fullmatch(pattern, s) for s in scopes):
            problems.append(f"{where} ({token.type} {token.value!r}): expected /{pattern}/, got {' '.join(scopes[1:])}")
    return problems


@pytest.mark.parametrize("path", VALID_INPUTS, ids=_rel)
def test_grammar_agrees_with_the_parser(path: Path, tokens: dict[Path, list[list[dict]]], lark_parser: Lark) -> None:
    problems = _agreement_problems(lark_parser, path, tokens[path])
    assert not problems, "\n".join(problems[:40])


def test_constructs_fixture_covers_every_terminal_and_rule(lark_parser: Lark) -> None:
    """The fixture holds every terminal and every rule of acx.lark, so the agreement test above
    checks each of them (a construct added to the language must be added to the fixture)."""
    tree = lark_parser.parse((FIXTURES / "constructs.acx").read_text(encoding="utf-8"))
    rules = {str(t.data) for t in tree.iter_subtrees()}
    seen = {tok.type for tok in tree.scan_values(lambda v: isinstance(v, Token))} | {"COMMENT", "WS"}
    terminals = {t.name for t in lark_parser.terminals}
    assert terminals - seen == set()
    grammar_rules = {str(r.alias or r.origin.name) for r in lark_parser.rules if not str(r.origin.name).startswith("_")}
    inlined = {"value", "key", "label"}  # `?value` and the aliased alternatives of key/label
    assert grammar_rules - inlined - rules == set()


def test_grammar_golden_fixtures_that_parse_agree(tokenize: Tokenize, lark_parser: Lark) -> None:
    """The language's own test files (tests/grammar/golden) that get past the parser: the grammar
    agrees with it, except where it marks a mistake found after parsing (E0105, E0115)."""
    paths = []
    for path in sorted(GRAMMAR_GOLDEN.glob("**/*.acx")):
        if not path.is_file():
            continue
        try:
            lark_parser.parse(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, LarkError):  # a syntax error: the lexical test's business
            continue
        paths.append(path)
    assert len(paths) >= 30
    result = tokenize(paths)
    problems = []
    for path in paths:
        found = _agreement_problems(lark_parser, path, result[path])
        if _diagnostic_codes(path) & LEXICAL_CODES:
            found = [p for p in found if "invalid.illegal" not in p]
        problems += found
    assert not problems, "\n".join(problems[:40])


# -- keywords ------------------------------------------------------------------------------------


def _lark_keywords(parser: Lark) -> set[str]:
    """Every terminal of acx.lark that is a literal word (`"import"`, the anonymous `"in"`, …)."""
    words = set()
    for term in parser.terminals:
        if term.pattern.type == "str" and re.fullmatch(r"[A-Za-z_]\w*", term.pattern.value):
            words.add(term.pattern.value)
    return words


# A statement that uses each keyword as one; the scope it must get.
KEYWORD_SAMPLES = {
    "import": ('import "common.acx"', r"keyword\.control\.import\.acx"),
    "let": ("let x = 1", r"storage\.type\.let\.acx"),
    "for": ("for m in models { run m {} }", r"keyword\.control\.loop\.for\.acx"),
    "in": ("for m in models { run m {} }", r"keyword\.control\.loop\.in\.acx"),
    "true": ("x = true", r"constant\.language\.boolean\.true\.acx"),
    "false": ("x = false", r"constant\.language\.boolean\.false\.acx"),
    "null": ("x = null", r"constant\.language\.null\.acx"),
}


def test_every_lark_keyword_is_highlighted(tmp_path: Path, tokenize: Tokenize, lark_parser: Lark) -> None:
    keywords = _lark_keywords(lark_parser)
    assert {"import", "let", "for", "in", "true", "false", "null"} <= keywords
    missing = keywords - KEYWORD_SAMPLES.keys()
    assert not missing, f"acx.lark has new keywords {sorted(missing)}: highlight them and add samples here"
    paths = {}
    for word, (sample, _) in KEYWORD_SAMPLES.items():
        paths[word] = tmp_path / f"{word}.acx"
        paths[word].write_text(sample + "\n", encoding="utf-8")
    result = tokenize(list(paths.values()))
    for word in keywords:
        sample, pattern = KEYWORD_SAMPLES[word]
        # The parser reads the word as the keyword's own terminal here, not as a name.
        lexed = [t for t in lark_parser.lex(sample) if t.value == word]
        assert lexed and all(t.type != "NAME" for t in lexed), (word, lexed)
        col = sample.index(f"{word}" if word != "in" else " in ") + (1 if word == "in" else 0)
        scopes = next(s for line, c, _, s in _chars(paths[word], result[paths[word]]) if line == 1 and c == col + 1)
        assert any(re.fullmatch(pattern, s) for s in scopes), (word, scopes)


def test_keywords_used_as_field_names_are_keys(tmp_path: Path, tokenize: Tokenize) -> None:
    """Outside the place a keyword can appear it is an ordinary name (docs/language.md)."""
    path = tmp_path / "fields.acx"
    path.write_text('in = 1\ntrue = 2\n"for" = 3\nrun r { null = 4 }\n', encoding="utf-8")
    by_text = {}
    for line, _, _, scopes in _chars(path, tokenize([path])[path]):
        by_text.setdefault(line, []).append(scopes)
    assert "variable.other.property.acx" in by_text[1][0]
    assert "variable.other.property.acx" in by_text[2][0]
    assert "meta.property-name.acx" in by_text[3][0]
    assert any("variable.other.property.acx" in s for s in by_text[4])


# -- lexical mistakes are marked invalid ---------------------------------------------------------

# The mistakes a line-by-line grammar can see: stray characters, unterminated strings, bad
# escapes and interpolations, unknown units, text beside a multi-line string's quotes.
LEXICAL_CODES = {"E0102", "E0104", "E0105", "E0107", "E0108", "E0115"}


def _diagnostics(acx: Path) -> list[dict]:
    golden = acx.with_suffix(".json")
    if not golden.is_file():
        return []
    diagnostics: list[dict] = json.loads(golden.read_text(encoding="utf-8"))["diagnostics"]
    return diagnostics


def _diagnostic_codes(acx: Path) -> set[str]:
    return {d["code"] for d in _diagnostics(acx)}


def _lexical_fixtures() -> list[Path]:
    return [p for p in sorted(GRAMMAR_GOLDEN.glob("e01*.acx")) if _diagnostic_codes(p) & LEXICAL_CODES]


def _visible(path: Path, diag: dict) -> bool:
    """Whether one line shows the mistake: not an unterminated multi-line string (it runs to the
    end of the file), nor a line indented less than a closing quote that comes later."""
    line, col = diag["span"]["line"], diag["span"]["col"]
    if diag["code"] == "E0104" and _lines(path)[line - 1][col - 1 :].startswith('"""'):
        return False
    return not (diag["code"] == "E0115" and "indented less" in diag["message"])


def test_lexical_mistakes_are_marked_invalid_where_acx_check_reports_them(tokenize: Tokenize) -> None:
    paths = _lexical_fixtures()
    assert len(paths) >= 7
    result = tokenize(paths)
    checked = 0
    for path in paths:
        invalid = {
            (line, col)
            for line, col, _, scopes in _chars(path, result[path])
            if any(s.startswith("invalid") for s in scopes)
        }
        lexical = [d for d in _diagnostics(path) if d["code"] in LEXICAL_CODES]
        for diag in lexical:
            if not _visible(path, diag):
                continue
            line, col = diag["span"]["line"], diag["span"]["col"]
            end = diag["span"]["end_col"] if diag["span"]["end_line"] == line else col + 1
            span = {(line, c) for c in range(col, max(end, col + 1))}
            assert span & invalid, f"{path.name}: {diag['code']} at {line}:{col}-{end} is not marked invalid"
            checked += 1
        first = min(d["span"]["line"] for d in lexical)
        early = sorted(pos for pos in invalid if pos[0] < first)
        assert not early, f"{path.name}: invalid before the first lexical error: {early}"
    assert checked >= 8


def test_invalid_fixture_marks_each_mistake(tokens: dict[Path, list[list[dict]]]) -> None:
    path = FIXTURES / "invalid.acx"
    marked: dict[int, set[str]] = {}
    for line, _, _, scopes in _chars(path, tokens[path]):
        marked.setdefault(line, set()).update(s for s in scopes if s.startswith("invalid"))
    assert marked[1] == set()
    assert marked[2] == {"invalid.illegal.character.acx"}  # 'single'
    assert marked[3] == {"invalid.illegal.numeric.acx"}  # 30min
    assert marked[4] == {"invalid.illegal.numeric.acx"}  # 1.2.3
    assert marked[5] == {"invalid.illegal.escape.acx"}  # \x (\t is fine)
    assert marked[6] == {"invalid.illegal.interpolation.acx"}  # ${a
    assert marked[7] == {"invalid.illegal.interpolation.acx"}  # ${1x}
    assert marked[8] == {"invalid.illegal.unterminated.acx"}
    assert marked[10] == {"invalid.illegal.character.acx"}  # harness: none
    assert marked[11] == {"invalid.illegal.character.acx"}  # @
    assert marked[9] == marked[12] == set()
    assert marked[13] == {"invalid.illegal.text-after-opening.acx"}  # """text"""
    assert marked[15] == set()
    assert marked[16] == {"invalid.illegal.text-before-closing.acx"}  # text"""
    assert marked[17] == marked[18] == marked[19] == set()  # \""" is an escape
