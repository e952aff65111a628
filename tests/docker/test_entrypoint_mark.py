"""Which process is the idle loop an image's ENTRYPOINT must hand over to (docker.md "entrypoint"):
no Docker engine needed. The loop's command is appended to the entrypoint's arguments, so an
entrypoint that never hands over carries it in its own command line while it runs — the check
raced such an entrypoint on a loaded CI machine and let the container count as started."""

from __future__ import annotations

from acx.drivers.docker._create import _IDLE_COMMAND, is_idle_loop

LOOP = " ".join(_IDLE_COMMAND)


def test_the_idle_loops_own_shell_is_the_loop() -> None:
    assert is_idle_loop(LOOP)
    assert is_idle_loop(LOOP[:60])  # `docker top` may show a cut command line


def test_an_entrypoint_holding_the_loop_in_its_arguments_is_not_the_loop() -> None:
    assert not is_idle_loop(f"python3 -c raise SystemExit(3) {LOOP}")
    assert not is_idle_loop(f"/usr/bin/tini -- {LOOP}")
    assert not is_idle_loop("sleep 3600")
