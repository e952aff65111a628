"""The gateway answers a WebSocket upgrade of the Responses API with 426 Upgrade Required, the
answer on which Codex CLI falls back to HTTPS at once (a 404 costs it five reconnects with
backoff; measured with codex 0.171). The real codex against the gateway is in the agent
compatibility suite (tests/agents/compat). Contract M4."""

from __future__ import annotations

import httpx
import trio

from acx.models import Endpoint, Gateway, Role
from acx.testing.fake_models import FakeModelServer, text


def test_websocket_upgrade_is_426_and_https_still_works() -> None:  # contract M4
    with FakeModelServer([text("hello")]) as srv:
        ep = Endpoint(base_url=srv.base_url, model="m", protocol="openai-responses", api_key="sk-real-key-xyz")

        async def main() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
            async with trio.open_nursery() as n:
                gw = Gateway({"agent": Role("agent", ep, None)})
                await gw.start(n)
                s = gw.open_session("t")
                env = s.env()
                upgrade = {
                    "Connection": "Upgrade",
                    "Upgrade": "websocket",
                    "Sec-WebSocket-Version": "13",
                    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                    "Authorization": f"Bearer {env['OPENAI_API_KEY']}",
                }
                async with httpx.AsyncClient() as c:
                    ws = await c.get(f"{env['OPENAI_BASE_URL']}/responses", headers=upgrade)
                    bad = await c.get(f"{env['OPENAI_BASE_URL']}/responses", headers={**upgrade, "Authorization": ""})
                    ok = await c.post(
                        f"{env['OPENAI_BASE_URL']}/responses",
                        headers={"Authorization": f"Bearer {env['OPENAI_API_KEY']}"},
                        json={"model": "x", "input": "hi"},
                    )
                s.close()
                await gw.aclose()
                return ws, bad, ok

        ws, bad, ok = trio.run(main)
    assert ws.status_code == 426, ws.text
    assert ws.json()["error"]["type"] == "upgrade_required" and "POST" in ws.json()["error"]["message"]
    assert bad.status_code == 401  # no token: still refused first
    assert ok.status_code == 200 and ok.json()["output"][0]["content"][0]["text"] == "hello"
    assert [r.method for r in srv.requests] == ["POST"]  # the upgrade never went upstream
