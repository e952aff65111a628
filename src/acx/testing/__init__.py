"""Public test helpers for acx users and driver authors.

``acx.testing.driver_conformance`` is the driver conformance suite: the same contract checks
(E1, E2, H5, T3, V2) against any :class:`acx.drivers.Driver` factory.
``acx.testing.results`` writes synthetic run directories (for report and viewer tests, benches).
``acx.testing.fake_models`` has scripted OpenAI- and Anthropic-compatible model servers on
loopback (real sockets) that record every request.
"""

__all__ = ["driver_conformance", "fake_models"]

from acx.testing import driver_conformance as driver_conformance
from acx.testing import fake_models as fake_models
