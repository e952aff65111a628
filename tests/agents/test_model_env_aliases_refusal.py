"""`model_env_aliases` naming a variable the gateway does not set is refused (QA).

It used to be dropped silently at run time (`if var in models`), so the agent missed the
variable it reads. contract M4 (agents in sandboxes reach models only through the gateway's
variables); the refusal is E0433 at planning.
"""

from __future__ import annotations

import msgspec
import pytest
import trio

from acx.components._configs import InstalledAgentConfig
from acx.components.harnesses.installed_agent import GATEWAY_VARS, resolve_config
from acx.errors import AcxPlanError
from acx.models import Endpoint, Gateway, Role


def _config(**params: object) -> InstalledAgentConfig:
    return msgspec.convert({"command": "agent", **params}, InstalledAgentConfig)


def test_alias_of_an_unknown_variable_is_refused() -> None:
    # contract M4
    with pytest.raises(AcxPlanError) as info:
        resolve_config(_config(model_env_aliases={"LLM_URL": "OPENAI_BASE_URL", "LLM_X": "NOT_SET_BY_GATEWAY"}))
    assert info.value.code == "E0433"
    assert info.value.path == "harness.params.model_env_aliases"
    assert "NOT_SET_BY_GATEWAY" in str(info.value)


def test_shipped_definitions_and_valid_aliases_pass() -> None:
    # contract M4: every shipped definition's aliases name gateway variables
    for agent in ("mini-swe-agent", "claude-code", "codex", "aider", "openhands"):
        resolve_config(_config(agent=agent))
    resolve_config(_config(model_env_aliases={"LLM_KEY": "ACX_MODEL_API_KEY"}))


def test_gateway_vars_are_what_the_gateway_sets() -> None:
    # contract M4: the list the check uses is exactly GatewaySession.env()'s keys
    ep = Endpoint(base_url="http://127.0.0.1:9/v1", model="m", api_key="k")

    async def main() -> set[str]:
        async with trio.open_nursery() as nursery:
            gw = Gateway({"agent": Role("agent", ep, None)})
            await gw.start(nursery)
            try:
                return set(gw.open_session("t").env())
            finally:
                await gw.aclose()

    assert trio.run(main) == set(GATEWAY_VARS)
