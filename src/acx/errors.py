"""The acx exception hierarchy.

Every exception acx raises on purpose derives from :class:`AcxError`. User errors (bad input:
a config file, a spec, a task directory, a CLI flag) are kept apart from runtime failures and
from internal errors (bugs), because the CLI maps them to different exit codes and the user to
different actions::

    AcxError
    ├── AcxUserError                exit 2: the input is wrong; carries Diagnostics
    │   ├── AcxSyntaxError          an .acx file does not parse
    │   ├── AcxConfigError          a YAML/JSON/.acx document is malformed or breaks the schema
    │   ├── AcxResolutionError      layers do not resolve: unknown ids, duplicates, missing env vars
    │   ├── AcxPlanError            planning refuses: contract violated, task file invalid
    │   │   └── CapabilityError     the selected driver cannot enforce what the plan demands
    │   └── AcxResultsError         a results directory cannot be resumed, reused or shown
    ├── AcxRuntimeError             exit 1: something failed while running
    │   ├── DriverError             a sandbox operation failed (open, exec, transfer, close)
    │   │   └── EnvironmentSetupError  a sandbox could not be opened or initialised
    │   └── PhaseTimeoutError       a phase exceeded its budget
    └── AcxInternalError            a bug in acx; please report it

Errors carry structured fields (``code``, ``span``, ``path``, ``help``) through their
:class:`~acx.diagnostics.Diagnostic` list and render as text or JSON.
"""

from __future__ import annotations

from typing import Any

from acx.diagnostics import Diagnostic, Span, render_json, render_text

__all__ = [
    "AcxConfigError",
    "AcxError",
    "AcxInternalError",
    "AcxPlanError",
    "AcxResolutionError",
    "AcxResultsError",
    "AcxRuntimeError",
    "AcxSyntaxError",
    "AcxUserError",
    "CapabilityError",
    "DriverError",
    "EnvironmentSetupError",
    "PhaseTimeoutError",
]


class AcxError(Exception):
    """Root of every exception acx raises on purpose."""

    exit_code = 1


class AcxUserError(AcxError):
    """The input is wrong. Holds one or more :class:`Diagnostic` s; renders them."""

    exit_code = 2
    default_code = "E0000"

    def __init__(
        self,
        message: str | None = None,
        *,
        code: str | None = None,
        span: Span | None = None,
        path: str | None = None,
        help: str | None = None,
        diagnostics: list[Diagnostic] | tuple[Diagnostic, ...] | None = None,
    ) -> None:
        diags = list(diagnostics or [])
        if message is not None:
            diags.insert(
                0,
                Diagnostic(code=code or self.default_code, message=message, span=span, path=path, help=help),
            )
        if not diags:
            raise AcxInternalError(f"{type(self).__name__} raised without a message")
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diags)
        super().__init__(self.diagnostics[0].message)

    # Convenience accessors for the primary diagnostic.
    @property
    def code(self) -> str:
        return self.diagnostics[0].code

    @property
    def span(self) -> Span | None:
        return self.diagnostics[0].span

    @property
    def path(self) -> str | None:
        return self.diagnostics[0].path

    @property
    def help(self) -> str | None:
        return self.diagnostics[0].help

    def render(self, *, sources: dict[str, str] | None = None, frames: bool = True) -> str:
        return render_text(self.diagnostics, sources=sources, frames=frames)

    def to_json(self) -> str:
        return render_json(self.diagnostics)

    def __str__(self) -> str:
        return self.render(frames=False)


class AcxSyntaxError(AcxUserError):
    default_code = "E0100"


class AcxConfigError(AcxUserError):
    default_code = "E0200"


class AcxResolutionError(AcxUserError):
    default_code = "E0300"


class AcxPlanError(AcxUserError):
    default_code = "E0400"


class CapabilityError(AcxPlanError):
    default_code = "E0450"


class AcxResultsError(AcxUserError):
    default_code = "E0600"


class AcxRuntimeError(AcxError):
    """Something failed while running (not the user's input)."""

    exit_code = 1

    def __init__(self, message: str, *, code: str = "runtime_failed", **fields: Any) -> None:
        super().__init__(message)
        self.code = code
        self.fields = fields


class DriverError(AcxRuntimeError):
    #: The operation failed because the machine holding the sandbox was lost (a cluster node died),
    #: not because of anything the task did: its attempt re-runs outside ``max_retries``
    #: (``Driver.max_infrastructure_losses``).
    infrastructure_lost: bool = False

    def __init__(self, message: str, *, code: str = "environment_failed", **fields: Any) -> None:
        super().__init__(message, code=code, **fields)


class EnvironmentSetupError(DriverError):
    def __init__(self, message: str, *, code: str = "environment_failed", **fields: Any) -> None:
        super().__init__(message, code=code, **fields)


class PhaseTimeoutError(AcxRuntimeError):
    def __init__(self, phase: str, seconds: float | None, **fields: Any) -> None:
        super().__init__(f"phase {phase!r} exceeded its budget of {seconds} s", code="phase_timeout", **fields)
        self.phase = phase
        self.seconds = seconds


class AcxInternalError(AcxError):
    """A bug in acx. The message says what invariant broke."""

    exit_code = 70
