"""acx: compile declarative agent-evaluation specs into immutable execution plans and run them.

The public API is small on purpose; sub-packages hold the rest:

* :mod:`acx.ir` — the frozen IR (RunRequest … ExecutionPlan, RunResult).
* :mod:`acx.errors` — the exception hierarchy rooted at :class:`AcxError`.
* :mod:`acx.diagnostics` — spans and diagnostics.
"""

from __future__ import annotations

__version__ = "0.1.0"

from acx.errors import AcxError as AcxError
from acx.errors import AcxUserError as AcxUserError

__all__ = ["AcxError", "AcxUserError", "__version__"]
