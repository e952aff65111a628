"""Hypothesis properties: print → parse round-trips, fmt idempotence, crash fuzzing."""

from __future__ import annotations

import functools
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acx.errors import AcxUserError
from acx.grammar import _ast as A
from acx.grammar import format_source, parse, print_module
from acx.grammar._format import KEYWORDS, VALUE_KEYWORDS
from acx.grammar._parser import DURATION_UNITS, SIZE_UNITS_MIB

_HEAD = string.ascii_letters + "_"
_TAIL = string.ascii_letters + string.digits + "_"
# Built from alphabets rather than from_regex: an order of magnitude faster to draw.
names = st.builds(
    lambda h, t, d: h + t + (f"-{d}" if d else ""),
    st.sampled_from(_HEAD),
    st.text(_TAIL, max_size=6),
    st.text(_TAIL, max_size=3),
)
stmt_names = names.filter(lambda s: s not in KEYWORDS)  # block kinds start a statement
ref_names = names.filter(lambda s: s not in VALUE_KEYWORDS)


def _normalise(parts: list[str | A.Interp]) -> tuple[str | A.Interp, ...]:
    """Merge adjacent text and drop empty text, as the parser does."""
    out: list[str | A.Interp] = []
    for p in parts:
        if isinstance(p, str):
            if not p:
                continue
            if out and isinstance(out[-1], str):
                out[-1] += p
                continue
        out.append(p)
    return tuple(out)


text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
strings = st.lists(st.one_of(text, names.map(A.Interp)), max_size=4).map(lambda ps: A.Str(_normalise(ps)))
plain_strings = text.map(lambda t: A.Str(_normalise([t])))


@st.composite
def durations(draw: st.DrawFn) -> A.Duration:
    parts = draw(
        st.lists(st.tuples(st.integers(0, 999), st.sampled_from(sorted(DURATION_UNITS))), min_size=1, max_size=3)
    )
    text_ = "".join(f"{n}{u}" for n, u in parts)
    return A.Duration(text_, sum(float(n) * DURATION_UNITS[u] for n, u in parts))


@st.composite
def sizes(draw: st.DrawFn) -> A.Size:
    n, unit = draw(st.integers(0, 4096)), draw(st.sampled_from(sorted(SIZE_UNITS_MIB)))
    return A.Size(f"{n}{unit}", float(n) * SIZE_UNITS_MIB[unit])


numbers = st.one_of(
    st.integers(-(10**12), 10**12).map(A.Num),
    st.floats(allow_nan=False, allow_infinity=False, width=64).map(A.Num),
)
scalars = st.one_of(
    strings,
    numbers,
    durations(),
    sizes(),
    st.booleans().map(A.Bool),
    st.just(A.Null()),
    ref_names.map(A.Ref),
    st.builds(lambda f, s: A.Call(A.Name(f), (s,)), st.sampled_from(["env", "secret"]), plain_strings),
)
keys = names.map(lambda n: A.Key(n)) | text.filter(bool).map(lambda t: A.Key(t, True))


def _values(children: st.SearchStrategy[A.Value]) -> st.SearchStrategy[A.Value]:
    assign = st.builds(A.Assign, keys, children)
    return st.one_of(
        st.lists(children, max_size=3).map(lambda xs: A.ListV(tuple(xs))),
        st.lists(assign, max_size=3).map(lambda xs: A.MapV(tuple(xs))),
    )


values = st.recursive(scalars, _values, max_leaves=8)


def _stmts(children: st.SearchStrategy[tuple[A.Stmt, ...]]) -> st.SearchStrategy[tuple[A.Stmt, ...]]:
    block = st.builds(
        A.Block,
        stmt_names.map(A.Name),
        st.one_of(st.none(), names.map(A.Name), strings),
        children,
    )
    loop = st.builds(A.For, names.map(A.Name), values, children)
    return st.lists(st.one_of(block, loop, leaf_stmt), max_size=3).map(tuple)


short_block = st.builds(A.Block, stmt_names.map(A.Name), st.one_of(names.map(A.Name), strings), st.none())
leaf_stmt = st.one_of(
    st.builds(A.Assign, keys, values),
    st.builds(A.Let, names.map(A.Name), values),
    st.builds(A.Import, plain_strings),
    short_block,
)
bodies = st.recursive(st.lists(leaf_stmt, max_size=3).map(tuple), _stmts, max_leaves=10)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(bodies)
def test_generated_asts_survive_print_then_parse(body: tuple[A.Stmt, ...]) -> None:
    module = A.Module("<generated>", body)
    printed = print_module(module)
    assert parse(printed).body == module.body, printed


_COMMENTS = st.sampled_from(["# note", "// other", "#", '# ${x} "q" {', "//#"])


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(bodies, st.data())
def test_fmt_is_idempotent_and_keeps_every_comment(body: tuple[A.Stmt, ...], data: st.DataObject) -> None:
    lines = print_module(A.Module("<generated>", body)).split("\n")[:-1]
    out: list[str] = []
    comments: list[str] = []
    in_block = False  # inside a """ string every character is text: nothing may be sprinkled
    for line in lines:  # sprinkle comments: own lines, line ends, blank lines
        quotes = line.replace("\\\\", "").replace('\\"', "").count('"""')
        if in_block or quotes:
            out.append(line)
            in_block ^= quotes % 2 == 1
            continue
        if data.draw(st.booleans()):
            comment = data.draw(_COMMENTS)
            comments.append(comment)
            out.append(comment)
        if line.strip() and data.draw(st.booleans()):
            comment = data.draw(_COMMENTS)
            comments.append(comment)
            line += "  " + comment
        out.append(line)
        if data.draw(st.booleans()):
            out.append("")
    source = "\n".join(out) + "\n"
    once = format_source(source)
    assert format_source(once) == once
    assert parse(once) == parse(source)  # formatting never changes meaning
    kept = [c.text for c in parse(once).comments]
    assert sorted(kept) == sorted("#" + c[2:] if c.startswith("//") else c for c in comments)


_ALPHABET = string.ascii_letters + string.digits + " \n\t{}[]()=;,\"#/\\$:.-_'@"


@settings(max_examples=300)
@given(st.text(alphabet=_ALPHABET, max_size=80) | st.text(max_size=40))
def test_random_text_yields_only_acx_diagnostics(source: str) -> None:
    _check_never_crashes(source)


def _check_never_crashes(source: str) -> None:
    from acx.compiler._acx_lower import lower_module
    from acx.compiler._validate import validate_document

    try:
        module = parse(source, "fuzz.acx")
        format_source(source, "fuzz.acx")
        doc = lower_module(module)
        validate_document(doc)  # the schema checker must cope with whatever .acx can express
    except AcxUserError as exc:
        assert exc.diagnostics and all(d.code.startswith("E0") for d in exc.diagnostics)


@functools.cache
def _lark_strategy() -> st.SearchStrategy[str]:
    from hypothesis.extra.lark import from_lark
    from lark import Lark

    from acx.grammar._parser import _GRAMMAR

    grammar = Lark(_GRAMMAR.read_text(), parser="lalr", lexer="contextual")
    # from_regex cannot honour lookaheads; give the number-like terminals explicit strategies, and
    # pad names with spaces so adjacent tokens stay apart (hypothesis does not generate %ignore).
    return from_lark(
        grammar,
        explicit={
            "NAME": names.map(lambda n: f" {n} "),
            "NUMBER": st.integers(-99, 99).map(lambda n: f" {n} "),
            "DURATION": durations().map(lambda d: f" {d.text} "),
            "SIZE": sizes().map(lambda s: f" {s.text} "),
            "STRING": strings.map(lambda s: print_module(A.Module("", (A.Assign(A.Key("k"), s),)))[4:-1]),
        },
    )


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data())
def test_grammar_generated_text_yields_only_acx_diagnostics(data: st.DataObject) -> None:
    _check_never_crashes(data.draw(_lark_strategy()))
