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

import json
import re
import shlex

__all__ = ["BuildFeature", "BuildPlan", "external_images", "plan_build"]

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


# ---- BuildKit-only syntax: what a build needs, and the faithful lowering of heredocs ----------

#: Flags only BuildKit's Dockerfile frontend knows → the oldest engine whose built-in frontend
#: builds them (engine major version; BuildKit came with 18.09, stable in 20.10).
_BUILDKIT_FLAGS: dict[tuple[str, str], int] = {
    ("RUN", "--mount"): 20,
    ("RUN", "--network"): 20,
    ("COPY", "--chmod"): 20,
    ("ADD", "--chmod"): 20,
    ("COPY", "--link"): 23,
    ("ADD", "--link"): 23,
    ("ADD", "--checksum"): 24,
    ("ADD", "--keep-git-dir"): 23,
}
#: Flags no default frontend builds (labs channel, or an entitlement acx never grants).
_REFUSED_FLAGS: dict[tuple[str, str], str] = {
    ("RUN", "--security"): "needs the `security.insecure` entitlement, which acx never grants",
    ("COPY", "--parents"): "is a labs-channel feature (a `# syntax=docker/dockerfile:1-labs` frontend image)",
    ("COPY", "--exclude"): "is a labs-channel feature (a `# syntax=docker/dockerfile:1-labs` frontend image)",
    ("ADD", "--exclude"): "is a labs-channel feature (a `# syntax=docker/dockerfile:1-labs` frontend image)",
}
_HEREDOC_WORD = re.compile(r"^(\d*)<<(-?)(['\"]?)([A-Za-z_][A-Za-z0-9_.-]*)\3$")
_DEFAULT_SHELL = ["/bin/sh", "-c"]
#: Writes a shebang heredoc where BuildKit mounts it (/dev/pipes/NAME, not in the image) and runs it.
_SHEBANG_RUNNER = (
    'mkdir -p /dev/pipes && printf "%s" "$2" > "/dev/pipes/$1" && chmod 755 "/dev/pipes/$1" && exec "/dev/pipes/$1"'
)


class BuildFeature(Exception):
    """A construct of a Dockerfile: where it is, what it is, and (for a refusal) what to do."""

    def __init__(self, line: int, feature: str, remedy: str = "") -> None:
        super().__init__(f"line {line}: {feature}")
        self.line = line
        self.feature = feature
        self.remedy = remedy


class BuildPlan:
    """How a Dockerfile is built: ``text`` is what the builder gets (heredocs lowered, a
    ``docker/dockerfile`` syntax directive dropped), ``buildkit`` the BuildKit-only flags it still
    uses (each with its line and the oldest engine that builds it), ``lowered`` what was lowered."""

    def __init__(self, text: str, buildkit: list[tuple[BuildFeature, int]], lowered: list[BuildFeature]) -> None:
        self.text = text
        self.buildkit = buildkit
        self.lowered = lowered

    @property
    def needs_buildkit(self) -> bool:
        return bool(self.buildkit)

    def min_engine(self) -> int:
        return max((v for _, v in self.buildkit), default=0)


def _syntax_directive(lines: list[str]) -> tuple[int, str] | None:
    for i, line in enumerate(lines):
        m = _DIRECTIVE.match(line.strip())
        if not m:
            return None
        if m.group(1).lower() == "syntax":
            return i, m.group(2)
    return None


def _heredocs(words: list[str]) -> list[tuple[str, bool]]:
    """``(delimiter, strip_tabs)`` of each heredoc word of an instruction line, in order."""
    out = []
    for word in words:
        m = _HEREDOC_WORD.match(word)
        if m:
            out.append((m.group(4), m.group(2) == "-"))
    return out


def _shell_of(stage_shell: list[str], rest: str) -> list[str]:
    try:
        value = json.loads(rest)
    except ValueError:
        return stage_shell
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else stage_shell


def plan_build(text: str) -> BuildPlan:
    """The build of one Dockerfile (pure). Raises :class:`BuildFeature` for what no builder acx
    drives can build and acx cannot lower faithfully (it names the line and a remedy)."""
    lines = text.splitlines()
    lowered: list[BuildFeature] = []
    buildkit: list[tuple[BuildFeature, int]] = []
    out: list[str] = []
    syntax = _syntax_directive(lines)
    if syntax is not None:
        index, value = syntax
        image = value.split("@", 1)[0]
        name = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
        if name.removeprefix("docker.io/") != "docker/dockerfile" or "labs" in image:
            raise BuildFeature(
                index + 1,
                f"`# syntax={value}` asks for a custom Dockerfile frontend image",
                "remove the directive (acx builds with the engine's built-in frontend and lowers heredocs "
                "itself; no frontend image is pulled)",
            )
        lowered.append(BuildFeature(index + 1, f"`# syntax={value}` (the engine's built-in frontend builds it)"))
    escape = "\\"
    for line in lines:
        m = _DIRECTIVE.match(line.strip())
        if not m:
            break
        if m.group(1).lower() == "escape" and m.group(2) in ("`", "\\"):
            escape = m.group(2)
    shells: dict[str, list[str]] = {}
    shell = list(_DEFAULT_SHELL)
    stage = ""
    i = 0
    while i < len(lines):
        if syntax is not None and i == syntax[0]:
            out.append("")  # the directive, dropped; the line numbers of the rest stay
            i += 1
            continue
        # One instruction: its physical lines (continuations joined, comment lines skipped).
        j = i
        parts: list[str] = []
        while True:
            piece = lines[j].strip()
            j += 1
            if piece.startswith("#") and parts:
                continue
            if piece.endswith(escape) and j < len(lines):
                parts.append(piece[: -len(escape)])
                continue
            parts.append(piece)
            break
        logical = " ".join(p for p in parts if p)
        keyword, _, rest = logical.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            shell = list(shells.get(words[0].lower(), _DEFAULT_SHELL)) if words else list(_DEFAULT_SHELL)
            stage = words[2].lower() if len(words) >= 3 and words[1].lower() == "as" else ""
            if stage:
                shells[stage] = shell
        elif keyword == "SHELL":
            shell = _shell_of(shell, rest)
            if stage:
                shells[stage] = shell
        if keyword not in ("RUN", "COPY", "ADD"):
            out.extend(lines[i:j])
            i = j
            continue
        words = rest.split()
        flags = []
        for word in words:
            if not word.startswith("--"):
                break
            flags.append(word)
        for flag in flags:
            key = (keyword, flag.split("=", 1)[0])
            if key in _REFUSED_FLAGS:
                raise BuildFeature(
                    i + 1,
                    f"`{keyword} {key[1]}` {_REFUSED_FLAGS[key]}",
                    f"rewrite line {i + 1} without {key[1]}",
                )
            if key in _BUILDKIT_FLAGS:
                buildkit.append((BuildFeature(i + 1, f"`{keyword} {key[1]}`"), _BUILDKIT_FLAGS[key]))
        docs = _heredocs(words[len(flags) :])
        if not docs:
            out.extend(lines[i:j])
            i = j
            continue
        if j - i > 1:
            raise BuildFeature(
                i + 1,
                f"a heredoc in a `{keyword}` continued onto the next line",
                "put the heredoc marker on the instruction's last line",
            )
        if keyword != "RUN":
            raise BuildFeature(
                i + 1,
                f"a `{keyword}` heredoc (`{keyword} <<{docs[0][0]} …`)",
                "put the content in a file under environment/ and COPY that file",
            )
        bodies: list[list[str]] = []
        for delimiter, strip_tabs in docs:
            body: list[str] = []
            while j < len(lines) and (lines[j].lstrip("\t") if strip_tabs else lines[j]) != delimiter:
                body.append(lines[j])
                j += 1
            if j >= len(lines):
                raise BuildFeature(
                    i + 1, f"a heredoc `<<{delimiter}` with no closing `{delimiter}` line", f"add a line `{delimiter}`"
                )
            bodies.append(body)
            j += 1
        command = " ".join(words[len(flags) :])
        out.append(_lower_run(keyword, flags, command, docs, bodies, lines[i + 1 : j], shell))
        out.extend([""] * (j - i - 1))  # keep the line numbers of everything after it
        lowered.append(BuildFeature(i + 1, f"`RUN <<{docs[0][0]}` heredoc"))
        i = j
    return BuildPlan("\n".join(out) + "\n", buildkit, lowered)


def _lower_run(
    keyword: str,
    flags: list[str],
    command: str,
    docs: list[tuple[str, bool]],
    bodies: list[list[str]],
    following: list[str],
    shell: list[str],
) -> str:
    """BuildKit's dispatch of a heredoc RUN (dockerfile2llb), as an exec-form RUN the classic
    builder runs the same way: a lone heredoc with a shebang is written to ``/dev/pipes/NAME`` and
    executed; a lone heredoc without one is the shell's script; anything else (``cat <<EOF >
    file``, several heredocs) goes to the shell whole, heredocs and all."""
    prefix = f"{keyword} " + "".join(f"{f} " for f in flags)
    if len(docs) == 1 and command.strip() == _heredoc_token(command):
        delimiter, strip_tabs = docs[0]
        data = "".join((line.lstrip("\t") if strip_tabs else line) + "\n" for line in bodies[0])
        if data.startswith("#!"):
            argv = ["/bin/sh", "-c", _SHEBANG_RUNNER, "acx-heredoc", delimiter, data]
        else:
            argv = [*shell, data]
        return prefix + json.dumps(argv)
    script = "\n".join([command, *following])
    return prefix + json.dumps([*shell, script])


def _heredoc_token(command: str) -> str:
    words = command.split()
    return words[0] if len(words) == 1 else ""
