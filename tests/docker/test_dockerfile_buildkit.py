"""BuildKit-only Dockerfile syntax (issue 22 item 5): what a build needs, and the lowering of
heredocs to the exec-form RUN the classic builder runs the way BuildKit's dockerfile2llb does
(a lone heredoc is the shell's script, one with a shebang is executed from /dev/pipes, anything
else goes to the shell whole). Pure: no engine."""

from __future__ import annotations

import json

import pytest

from acx.drivers.docker._dockerfile import BuildFeature, plan_build

pytestmark = pytest.mark.no_engine


def _runs(text: str) -> list[list[str]]:
    return [json.loads(line[line.index("[") :]) for line in text.splitlines() if line.startswith("RUN") and "[" in line]


def test_plain_dockerfile_is_unchanged() -> None:
    text = "FROM base\nRUN echo hi && \\\n    echo there\nCOPY a /a\n"
    plan = plan_build(text)
    assert plan.text == text and not plan.needs_buildkit and not plan.lowered


def test_lone_heredoc_is_the_shells_script_and_keeps_line_numbers() -> None:
    text = "FROM base\nRUN <<EOF\nset -e\necho $HOME > /h\nEOF\nWORKDIR /app\n"
    plan = plan_build(text)
    assert _runs(plan.text) == [["/bin/sh", "-c", "set -e\necho $HOME > /h\n"]]
    assert plan.text.splitlines()[5] == "WORKDIR /app"  # same line as before
    assert [f.line for f in plan.lowered] == [2]


def test_heredoc_uses_the_stage_shell() -> None:
    text = 'FROM base AS one\nSHELL ["/bin/bash", "-o", "pipefail", "-c"]\nFROM one\nRUN <<EOF\necho\nEOF\n'
    assert _runs(plan_build(text).text) == [["/bin/bash", "-o", "pipefail", "-c", "echo\n"]]
    fresh = 'FROM base AS one\nSHELL ["/bin/bash", "-c"]\nFROM other\nRUN <<EOF\necho\nEOF\n'
    assert _runs(plan_build(fresh).text) == [["/bin/sh", "-c", "echo\n"]]


def test_shebang_heredoc_is_executed_from_dev_pipes() -> None:
    plan = plan_build("FROM base\nRUN <<'PY'\n#!/usr/bin/python3\nprint(1)\nPY\n")
    ((*runner, name, data),) = _runs(plan.text)
    assert runner[:2] == ["/bin/sh", "-c"] and "/dev/pipes/$1" in runner[2]
    assert (name, data) == ("PY", "#!/usr/bin/python3\nprint(1)\n")


def test_other_heredocs_go_to_the_shell_whole() -> None:
    plan = plan_build('FROM base\nRUN <<EOT cat > /f && echo x\nline "q" $V\nEOT\n')
    assert _runs(plan.text) == [
        ["/bin/sh", "-c", 'cat > /f && echo x\nline "q" $V\nEOT'.replace("cat", "<<EOT cat", 1)]
    ]


def test_dash_heredoc_strips_tabs() -> None:
    plan = plan_build("FROM base\nRUN <<-EOF\n\techo a\n\tEOF\n")
    assert _runs(plan.text) == [["/bin/sh", "-c", "echo a\n"]]


def test_flags_stay_and_buildkit_flags_are_recorded_with_their_line() -> None:
    text = (
        "FROM base\nRUN \\\n  --mount=type=cache,target=/c echo hi\nCOPY --chmod=755 a /a\n"
        "RUN --mount=type=tmpfs,target=/t <<EOF\ntrue\nEOF\n"
    )
    plan = plan_build(text)
    assert [(f.line, f.feature) for f, _ in plan.buildkit] == [
        (2, "`RUN --mount`"),
        (4, "`COPY --chmod`"),
        (5, "`RUN --mount`"),
    ]
    assert plan.needs_buildkit and plan.min_engine() == 20
    assert "RUN --mount=type=tmpfs,target=/t [" in plan.text


def test_docker_dockerfile_syntax_is_dropped_custom_frontends_refused() -> None:
    plan = plan_build("# syntax=docker/dockerfile:1.7\nFROM base\n")
    assert plan.text.splitlines()[1] == "FROM base" and plan.lowered[0].line == 1
    with pytest.raises(BuildFeature) as info:
        plan_build("# syntax=example.com/my/frontend:2\nFROM base\n")
    assert info.value.line == 1 and "remove the directive" in info.value.remedy


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("FROM b\nCOPY <<EOF /etc/motd\nhi\nEOF\n", 2, "COPY"),
        ("FROM b\nRUN <<EOF\nnever closed\n", 2, "no closing"),
        ("FROM b\nRUN --security=insecure make\n", 2, "entitlement"),
        ("FROM b\nCOPY --parents a/ /x\n", 2, "labs"),
        ("FROM b\nRUN cat <<EOF \\\n  > /x\nEOF\n", 2, "continued"),
    ],
)
def test_what_cannot_be_built_is_refused_with_its_line(text: str, line: int, words: str) -> None:
    with pytest.raises(BuildFeature) as info:
        plan_build(text)
    assert info.value.line == line and words in info.value.feature and info.value.remedy
