"""Source positions of keys in a TOML document (``tomllib`` keeps none).

:class:`TomlLocator` maps dotted key paths (``verifier.environment.workdir``,
``verifier.collect.1.user``, ``artifacts.2``) to ``(line, col, end_line, end_col)`` so load errors
can point at the offending key. It runs only on text ``tomllib`` already accepted, and it is a
small tokenizer rather than a line scanner, so multi-line strings (a ``[table]`` or ``key =``
inside ``\"\"\"…\"\"\"`` is text), multi-line arrays, inline tables, dotted keys and array tables
(``[[verifier.collect]]`` → ``verifier.collect.0``) all land on the right line. Array elements are
indexed like array tables, so ``collect = [{…}, {…}]`` and ``[[collect]]`` give the same paths.
"""

from __future__ import annotations

import bisect
import re

__all__ = ["TomlLocator"]

Position = tuple[int, int, int, int]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# A scalar (number, bool, date-time): up to the next separator; a date-time may hold one space.
_SCALAR = re.compile(r"[^,\]\}#\r\n]+")


class TomlLocator:
    """Dotted key path → position of its key (or array element), for valid TOML text."""

    def __init__(self, text: str) -> None:
        self.positions: dict[str, Position] = {}
        try:
            _Scanner(text, self.positions).document()
        except (IndexError, ValueError):  # positions are a courtesy: keep what was found
            pass

    @property
    def lines(self) -> dict[str, int]:
        return {path: pos[0] for path, pos in self.positions.items()}

    def position_of(self, path: str) -> Position | None:
        """Position of ``path`` or of its nearest recorded ancestor; None when nothing matches."""
        parts = path.split(".")
        while parts:
            pos = self.positions.get(".".join(parts))
            if pos is not None:
                return pos
            parts.pop()
        return None

    def line_of(self, path: str) -> int:
        """Line of ``path`` or of its nearest declared ancestor; 1 when nothing matches."""
        pos = self.position_of(path)
        return pos[0] if pos is not None else 1


class _Scanner:
    def __init__(self, text: str, out: dict[str, Position]) -> None:
        self.s = text
        self.i = 0
        self.out = out
        self.line_starts = [0, *(m.end() for m in re.finditer("\n", text))]
        self.array_tables: dict[str, int] = {}

    # ---- positions -----------------------------------------------------------------------
    def _pos(self, index: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, index)
        return line, index - self.line_starts[line - 1] + 1

    def record(self, path: list[str], start: int, end: int) -> None:
        key = ".".join(path)
        if key not in self.out:
            line, col = self._pos(start)
            end_line, end_col = self._pos(end)
            self.out[key] = (line, col, end_line, end_col)

    # ---- whitespace ----------------------------------------------------------------------
    def skip(self, *, newlines: bool) -> None:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            elif c == "#":
                end = s.find("\n", self.i)
                self.i = len(s) if end < 0 else end
            else:
                return

    def expect(self, char: str) -> None:
        if self.s[self.i] != char:
            raise ValueError(f"expected {char!r} at {self.i}")
        self.i += 1

    # ---- document ------------------------------------------------------------------------
    def document(self) -> None:
        table: list[str] = []
        while True:
            self.skip(newlines=True)
            if self.i >= len(self.s):
                return
            if self.s[self.i] == "[":
                table = self.header()
            else:
                self.keyval(table)

    def header(self) -> list[str]:
        start = self.i
        double = self.s.startswith("[[", self.i)
        self.i += 2 if double else 1
        parts = self.key()
        self.skip(newlines=False)
        self.expect("]")
        if double:
            self.expect("]")
            # ``[[steps.verifier.collect]]`` after ``[[steps]]``: an array in the latest step
            table = [*self._latest_elements(parts[:-1]), parts[-1]]
            base = ".".join(table)
            index = self.array_tables.get(base, 0)
            self.array_tables[base] = index + 1
            table.append(str(index))
            for depth in range(1, len(table)):  # the array and its parents: first declared here
                self.record(table[:depth], start, self.i)
        else:
            table = self._latest_elements(parts)
        self.record(table, start, self.i)
        return table

    def _latest_elements(self, parts: list[str]) -> list[str]:
        """``[c.sub]`` after ``[[c]]`` belongs to the latest element of ``c``."""
        out: list[str] = []
        for part in parts:
            out.append(part)
            n = self.array_tables.get(".".join(out))
            if n:
                out.append(str(n - 1))
        return out

    def keyval(self, prefix: list[str]) -> None:
        start = self.i
        parts = self.key()
        for depth in range(1, len(parts)):  # dotted keys declare their parents here too
            self.record([*prefix, *parts[:depth]], start, start)
        self.skip(newlines=False)
        self.expect("=")
        self.skip(newlines=False)
        path = [*prefix, *parts]
        end = self.value(path)
        self.record(path, start, end)

    def key(self) -> list[str]:
        parts: list[str] = []
        while True:
            self.skip(newlines=False)
            c = self.s[self.i]
            if c == '"':
                start = self.i
                self.i = self._basic_string_end(self.i)
                parts.append(self.s[start + 1 : self.i - 1])
            elif c == "'":
                end = self.s.index("'", self.i + 1)
                parts.append(self.s[self.i + 1 : end])
                self.i = end + 1
            else:
                m = _BARE_KEY.match(self.s, self.i)
                if m is None:
                    raise ValueError(f"no key at {self.i}")
                parts.append(m.group())
                self.i = m.end()
            self.skip(newlines=False)
            if self.i < len(self.s) and self.s[self.i] == ".":
                self.i += 1
                continue
            return parts

    # ---- values --------------------------------------------------------------------------
    def value(self, path: list[str]) -> int:
        """Skip the value at ``self.i`` (recording array elements and inline-table keys)."""
        s, i = self.s, self.i
        if s.startswith('"""', i):
            self.i = self._multiline_end(i, '"""', escapes=True)
        elif s.startswith("'''", i):
            self.i = self._multiline_end(i, "'''", escapes=False)
        elif s[i] == '"':
            self.i = self._basic_string_end(i)
        elif s[i] == "'":
            self.i = s.index("'", i + 1) + 1
        elif s[i] == "[":
            self._array(path)
        elif s[i] == "{":
            self._inline_table(path)
        else:
            m = _SCALAR.match(s, i)
            if m is None:
                raise ValueError(f"no value at {i}")
            self.i = i + len(m.group().rstrip())
        return self.i

    def _array(self, path: list[str]) -> None:
        self.i += 1
        index = 0
        while True:
            self.skip(newlines=True)
            if self.s[self.i] == "]":
                self.i += 1
                return
            start = self.i
            element = [*path, str(index)]
            end = self.value(element)
            self.record(element, start, end)
            self.skip(newlines=True)
            if self.s[self.i] == ",":
                self.i += 1
                index += 1

    def _inline_table(self, path: list[str]) -> None:
        self.i += 1
        while True:
            self.skip(newlines=False)
            if self.s[self.i] == "}":
                self.i += 1
                return
            self.keyval(path)
            self.skip(newlines=False)
            if self.s[self.i] == ",":
                self.i += 1

    def _basic_string_end(self, i: int) -> int:
        s = self.s
        i += 1
        while s[i] != '"':
            i += 2 if s[i] == "\\" else 1
        return i + 1

    def _multiline_end(self, i: int, quote: str, *, escapes: bool) -> int:
        s = self.s
        i += 3
        while not s.startswith(quote, i):
            i += 2 if escapes and s[i] == "\\" else 1
        i += 3
        for _ in range(2):  # up to two quotes may end the content itself: """a""""
            if i < len(s) and s[i] == quote[0]:
                i += 1
        return i
