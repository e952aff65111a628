"""QA regression (no engine): the images a Dockerfile build would fetch from a registry.

With ``pull = never`` the docker driver checks these locally before building, because the engine
pulls an absent ``FROM`` base even when asked not to pull.
"""

from __future__ import annotations

from acx.drivers.docker._dockerfile import external_images


def test_plain_from() -> None:
    # contract H3
    assert external_images("FROM acx-test/bookworm:latest\nWORKDIR /app\n") == (["acx-test/bookworm:latest"], [])


def test_stages_scratch_and_copy_from() -> None:
    # contract H3
    text = (
        "FROM acx-test/bookworm:latest AS build\n"
        "RUN make\n"
        "FROM scratch\n"
        "COPY --from=build /out /out\n"
        "COPY --from=0 /a /a\n"
        "COPY --from=nginx:1.25 /etc/nginx /etc/nginx\n"
        "RUN --mount=type=bind,from=busybox:1,target=/m true\n"
        "FROM BUILD\n"  # stage names are case-insensitive
    )
    assert external_images(text) == (["acx-test/bookworm:latest", "nginx:1.25", "busybox:1"], [])


def test_global_args_flags_and_continuations() -> None:
    # contract H3
    text = (
        "# syntax=docker/dockerfile:1\n"
        "ARG BASE=python\n"
        "ARG TAG\n"
        "FROM --platform=linux/amd64 \\\n"
        "    ${BASE}:${TAG:-3.12-slim}\n"
        "# a comment\n"
        "FROM $BASE:3.11\n"
    )
    assert external_images(text) == (["python:3.12-slim", "python:3.11"], [])


def test_escape_directive() -> None:
    # contract H3
    text = "# escape=`\nFROM `\n  acx-test/busybox:latest\nRUN dir c:\\\n"
    assert external_images(text) == (["acx-test/busybox:latest"], [])


def test_unknowable_references_are_reported_not_guessed() -> None:
    # contract H3
    text = "ARG NOPE\nFROM ${NOPE}\nFROM acx-test/busybox:latest\nARG LOCAL=x\nCOPY --from=$LOCAL /a /a\n"
    images, unresolved = external_images(text)
    assert images == ["acx-test/busybox:latest"]
    assert unresolved == ["${NOPE}", "$LOCAL"]


def test_duplicates_once() -> None:
    # contract H3
    assert external_images("FROM a:1\nFROM a:1\n") == (["a:1"], [])
