"""acx: compile declarative agent-evaluation specs into immutable execution plans and run them.

The public API is small on purpose; sub-packages hold the rest:

* :mod:`acx.ir` — the frozen IR (RunRequest … ExecutionPlan, RunResult).
* :mod:`acx.errors` — the exception hierarchy rooted at :class:`AcxError`.
* :mod:`acx.diagnostics` — spans and diagnostics.
* :mod:`acx.api` — the library API; :func:`acx.compile`, :func:`acx.run` (and their ``_async``
  forms for trio users) are re-exported here, imported on first use so ``import acx`` stays
  cheap.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import Any

from acx.errors import AcxError as AcxError
from acx.errors import AcxUserError as AcxUserError

__all__ = ["AcxError", "AcxUserError", "__version__", "compile", "compile_async", "run", "run_async"]

_API = frozenset({"compile", "compile_async", "run", "run_async"})


def __getattr__(name: str) -> Any:
    if name in _API:
        import acx.api

        return getattr(acx.api, name)
    raise AttributeError(f"module 'acx' has no attribute {name!r}")
