"""What a Dockerfile build would fetch from a registry: its external images.

The engine pulls an absent ``FROM`` base (and an absent ``COPY --from`` / ``RUN --mount from=``
image) even with ``pull=False`` — that flag only turns off forced re-pulls. With ``pull: never``
the docker driver therefore checks these images locally before it builds
(:func:`external_images`), so a build never reaches for a registry behind the user's back.

Handled: line continuations (and the ``# escape=`` directive), global ``ARG`` defaults used in
``FROM`` (``$X``, ``${X}``, ``${X:-word}``, ``${X:+word}``), ``--platform`` flags, build stages
referenced by name or index, ``scratch``. A reference that still holds a variable after that
(an ``ARG`` without default, a stage-local ``ARG``) cannot be known before the build: it is
returned in ``unresolved`` so the caller can say so.
"""

from __future__ import annotations

import re
import shlex

__all__ = ["external_images"]

_DIRECTIVE = re.compile(r"^#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def _instructions(text: str) -> list[str]:
    """Logical lines (continuations joined, comments and parser directives dropped)."""
    lines = text.splitlines()
    escape = "\\"
    for line in lines:  # parser directives come first, before any other line
        m = _DIRECTIVE.match(line.strip())
        if not m:
            break
        if m.group(1).lower() == "escape" and m.group(2) in ("`", "\\"):
            escape = m.group(2)
    out: list[str] = []
    current: list[str] = []
    for raw in lines:
        stripped = raw.strip()
        if stripped.startswith("#") or (current and not stripped):
            continue  # comments (also inside a continuation) and blank continuation lines
        if stripped.endswith(escape):
            current.append(stripped[: -len(escape)])
            continue
        current.append(stripped)
        joined = " ".join(part for part in current if part)
        current = []
        if joined:
            out.append(joined)
    if current:
        out.append(" ".join(part for part in current if part))
    return out


def _substitute(word: str, args: dict[str, str | None]) -> str:
    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(4)
        value = args.get(name)
        if m.group(2) == "-":
            return value if value else m.group(3)
        if m.group(2) == "+":
            return m.group(3) if value else ""
        return m.group(0) if value is None else value

    return _VAR.sub(repl, word)


def _split(rest: str) -> list[str]:
    try:
        return shlex.split(rest, posix=True)
    except ValueError:
        return rest.split()


def external_images(text: str) -> tuple[list[str], list[str]]:
    """``(images, unresolved)``: the registry images a build of this Dockerfile needs.

    ``images`` are fully known references (in order, without duplicates); ``unresolved`` are
    references that depend on a value only known at build time.
    """
    args: dict[str, str | None] = {}
    stages: list[str] = []  # lower-case stage names ("" for an unnamed stage)
    images: list[str] = []
    unresolved: list[str] = []
    seen_from = False

    def add(ref: str) -> None:
        if not ref or ref.lower() == "scratch":
            return
        if ref.lower() in stages or (ref.isdigit() and int(ref) < len(stages)):
            return
        target = unresolved if "$" in ref else images
        if ref not in target:
            target.append(ref)

    for line in _instructions(text):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        words = _split(rest)
        if keyword == "ARG" and not seen_from:
            for word in words:
                name, eq, value = word.partition("=")
                args[name] = value if eq else args.get(name)
        elif keyword == "FROM":
            seen_from = True
            positional = [w for w in words if not w.startswith("--")]
            if positional:
                add(_substitute(positional[0], args))
                alias = positional[2] if len(positional) >= 3 and positional[1].lower() == "as" else ""
                stages.append(alias.lower())
        elif keyword in ("COPY", "RUN"):
            # Stage-local ARGs are not tracked: a variable here stays unresolved.
            for word in words:
                if not word.startswith("--"):
                    break
                if keyword == "COPY" and word.startswith("--from="):
                    add(word[len("--from=") :])
                elif keyword == "RUN" and word.startswith("--mount="):
                    for option in word[len("--mount=") :].split(","):
                        key, _, value = option.partition("=")
                        if key == "from" and value:
                            add(value)
    return images, unresolved
