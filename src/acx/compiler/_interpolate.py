"""Environment interpolation (contract R6, V1).

* A string that is exactly ``${VAR}`` is an env reference. Outside env-variable maps it is
  substituted at compile time (missing VAR → error naming VAR, never a value) — except for
  secrets: at sensitive positions (``api_key``, ``*_token``, headers, ...; see :mod:`._redact`),
  at the front end's ``secret_paths``, and wherever VAR's *name* looks like a secret
  (``OPENAI_API_KEY``, ``*_TOKEN``, ``*PASSWORD*``; :func:`~._redact.is_secret_name`), and wherever
  VAR's *value* holds a URL password (``http://user:pw@host``), it stays a
  reference (recorded in ``secret_refs``; W0302 when VAR is unset) and is resolved by the process
  that uses it, so no view or plan file ever holds the value.
* ``${VAR}`` embedded in a longer string is rejected outside env maps, and so are whole values
  that only look like a reference: ``${VAR:-default}`` (defaults exist only in env maps) and
  malformed references (``${}``, ``${ X }``, ``${1X}``, ``${X``).
* Inside env-variable maps (:data:`ENV_MAP_KEYS`) values are kept verbatim: ``${VAR}``,
  ``${VAR:-default}`` and embedded references are resolved by the driver right before use (V1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from acx.compiler._source import Path_
from acx.diagnostics import Diagnostic, Span
from acx.envref import ENV_MAP_KEYS, has_reference_syntax, malformed_whole, whole_default_name, whole_name
from acx.secrets import (
    MIN_SECRET_LENGTH,
    PLACEHOLDER_VALUES,
    holds_url_credentials,
    is_secret_name,
    is_secret_value,
    is_sensitive_path,
)

__all__ = [
    "ENV_MAP_KEYS",
    "Interpolation",
    "env_ref_name",
    "format_path",
    "has_embedded_ref",
    "in_env_map",
    "interpolate",
]


def env_ref_name(value: Any) -> str | None:
    """``VAR`` when ``value`` is exactly ``${VAR}``, else None (:func:`acx.envref.whole_name`)."""
    return whole_name(value)


def has_embedded_ref(value: Any) -> bool:
    """A string that contains ``${`` but is not a whole-field ``${VAR}``."""
    return has_reference_syntax(value) and whole_name(value) is None


#: Sections a secret cannot fill: output names and results paths become directory names, and
#: execution settings are shown in events and logs (a retry's reason quotes its pattern).
NO_SECRET_SECTIONS = frozenset({("output",), ("runtime",), ("execution",)})


def no_secret_here(where: str, name: str, span: Span | None) -> Diagnostic:
    return Diagnostic(
        code="E0204",
        message=f"`{where}` is shown in results, logs or directory names: it cannot be the secret reference "
        f"`${{{name}}}`",
        span=span,
        path=where,
        help="write the value, or reference it with an ordinary variable name (`env(...)` instead of "
        "`secret(...)` in .acx)",
    )


def in_env_map(path: Path_) -> bool:
    return any(isinstance(p, str) and p in ENV_MAP_KEYS for p in path[:-1])


@dataclass
class Interpolation:
    """What one interpolation pass read: substituted names, kept secret refs, per-path origin."""

    env_inputs: set[str] = field(default_factory=set)
    secret_refs: set[str] = field(default_factory=set)
    #: relative path → variable name, for provenance ("orch.yaml:3:5 via ${VAR}").
    substituted: dict[Path_, str] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)


def interpolate(
    data: Any,
    environ: Mapping[str, str],
    *,
    span_of: Callable[[Path_], Span | None],
    abs_prefix: Path_ = (),
    secret_paths: frozenset[Path_] = frozenset(),
    display_prefix: Path_ | None = None,
    result: Interpolation | None = None,
    literal_paths: frozenset[Path_] = frozenset(),
) -> tuple[Any, Interpolation]:
    """Substitute whole-field references in ``data`` (a fragment found at ``abs_prefix``).

    ``span_of`` maps a relative path to its span for diagnostics; ``abs_prefix`` is the
    fragment's semantic position (it decides env-map membership and sensitivity);
    ``secret_paths`` are relative paths a front end marked secret. Returns the new data
    (inputs untouched) and what was read. ``display_prefix`` (default ``abs_prefix``) is the
    fragment's position in its document, used for the field paths of diagnostics.
    ``literal_paths`` are relative paths whose ``${`` is literal text (left as written).
    """
    res = result if result is not None else Interpolation()
    ctx = _Walk(
        prefix=abs_prefix,
        environ=environ,
        span_of=span_of,
        secret_paths=secret_paths,
        literal_paths=literal_paths,
        res=res,
        shown=abs_prefix if display_prefix is None else display_prefix,
    )
    return ctx.walk(data, ()), res


@dataclass
class _Walk:
    """One interpolation pass over a fragment (the arguments of :func:`interpolate`)."""

    prefix: Path_
    environ: Mapping[str, str]
    span_of: Callable[[Path_], Span | None]
    secret_paths: frozenset[Path_]
    literal_paths: frozenset[Path_]
    res: Interpolation
    shown: Path_

    def walk(self, value: Any, rel: Path_) -> Any:
        if isinstance(value, Mapping):
            return {k: self.walk(v, (*rel, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.walk(v, (*rel, i)) for i, v in enumerate(value)]
        if not has_reference_syntax(value) or rel in self.literal_paths:
            self._check_short_secret(value, rel)
            return value
        full = (*self.prefix, *rel)
        if in_env_map(full) or (full and full[-1] in ENV_MAP_KEYS):
            return value  # V1: resolved by the driver at use time
        name = env_ref_name(value)
        where = format_path((*self.shown, *rel))
        if name is None:
            self.res.diagnostics.append(embedded_ref_diagnostic(value, self.span_of(rel), where))
            return value
        if (
            rel in self.secret_paths
            or is_sensitive_path(full)
            or is_secret_name(name)
            or holds_url_credentials(self.environ.get(name, ""))
        ):
            if full[:1] in NO_SECRET_SECTIONS:
                self.res.diagnostics.append(no_secret_here(where, name, self.span_of(rel)))
                return value
            self.res.secret_refs.add(name)
            if name not in self.environ:
                # Compiling never reads a secret, so a dry run in CI needs none; `acx run`
                # refuses up front when it is still missing (E0310).
                self.res.diagnostics.append(
                    Diagnostic(
                        code="W0302",
                        severity="warning",
                        message=f"secret `{name}` is not set (referenced as `${{{name}}}`); `acx run` will need it",
                        span=self.span_of(rel),
                        path=where,
                        help=f"export {name}=... in the shell that runs the evaluation",
                    )
                )
            return value  # a secret stays a reference; the process that uses it reads it
        if name not in self.environ:
            self.res.diagnostics.append(
                Diagnostic(
                    code="E0302",
                    message=f"environment variable `{name}` is not set (referenced as `${{{name}}}`)",
                    span=self.span_of(rel),
                    path=where,
                    help=f"export {name}=... before running acx, or replace the reference with a value",
                )
            )
            return value
        self.res.env_inputs.add(name)
        self.res.substituted[rel] = name
        return self.environ[name]

    def _check_short_secret(self, value: Any, rel: Path_) -> None:
        """W0305: a literal secret too short to be masked (a known placeholder is fine: public)."""
        if not isinstance(value, str) or not value or is_secret_value(value):
            return
        if value.strip().lower() in PLACEHOLDER_VALUES:
            return
        full = (*self.prefix, *rel)
        if in_env_map(full) or (full and full[-1] in ENV_MAP_KEYS):
            return  # env maps' literal values are configuration, masked in messages only
        if rel not in self.secret_paths and not is_sensitive_path(full):
            return
        where = format_path((*self.shown, *rel))
        self.res.diagnostics.append(
            Diagnostic(
                code="W0305",
                severity="warning",
                message=f"`{where}` is shorter than {MIN_SECRET_LENGTH} characters: too short to be a secret, "
                "it will not be masked in logs or result files",
                span=self.span_of(rel),
                path=where,
                help="use the real secret (from `${VAR}`), or a known placeholder such as `none` if the server "
                "takes no key",
            )
        )


_NAME_HELP = "a name is letters, digits and `_`, not starting with a digit"


def _malformed_reason(inner: str, closed: bool) -> str:
    if not closed:
        return "the closing `}` is missing"
    if not inner.strip():
        return "the variable name is empty"
    if inner != inner.strip():
        return "the braces hold spaces around the name"
    if inner[0].isdigit():
        return "a variable name cannot start with a digit"
    return "the name holds a character other than letters, digits and `_`"


def embedded_ref_diagnostic(value: str, span: Span | None, path: str) -> Diagnostic:
    """E0212 for a value outside env-variable maps that holds ``${`` but is no whole ``${VAR}``.

    Says which of the three it is: a ``${VAR:-default}`` (supported only in env maps), a malformed
    reference (``${}``, ``${ X }``, ``${1X}``, ``${X``) or a reference inside a longer string. The
    message never quotes the value (it may sit at a secret position); the code frame shows it.
    """
    name = whole_default_name(value)
    if name is not None:
        return Diagnostic(
            code="E0212",
            message=f"unsupported environment interpolation in `{path}`: `${{{name}:-...}}` (a default value) "
            "is only supported in env-variable maps",
            span=span,
            path=path,
            help=f"write `${{{name}}}` and export {name}, or write the value itself; `${{VAR:-default}}` works "
            "in env_variables, run_env_variables and evaluation_env_variables",
        )
    malformed = malformed_whole(value)
    if malformed is not None:
        inner, closed = malformed
        return Diagnostic(
            code="E0212",
            message=f"malformed environment reference in `{path}`: {_malformed_reason(inner, closed)}",
            span=span,
            path=path,
            help=f"write the whole value as `${{NAME}}` ({_NAME_HELP}), e.g. `base_url: ${{MODEL_BASE_URL}}`",
        )
    return Diagnostic(
        code="E0212",
        message=f"unsupported environment interpolation in `{path}`: `${{...}}` inside a longer string",
        span=span,
        path=path,
        help="use whole-field ${VAR}: the whole value must be one reference, "
        "e.g. `base_url: ${MODEL_BASE_URL}`"
        " (embedded references are allowed only in env-variable maps)",
    )


def format_path(path: Path_) -> str:
    """`requests[0].execution.max_retries` for ('requests', 0, 'execution', 'max_retries')."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out or "<root>"
