"""A network policy whose host lists do not fit its mode is a located error (issue 24 item 10).

`denylist` with `allowed_hosts` used to compile to `denied_hosts: []`: a policy that denies
nothing while the user believes it denies something — a silent downgrade (contract P7)."""

from __future__ import annotations

import pytest

from acx.compiler import compile_orchestration
from acx.errors import AcxUserError

ORCH = """
version: 1
name: n
defaults:
  model: {{id: m}}
  harness: {{id: oracle}}
requests:
  - name: a
    benchmark: {{id: exact_match, dataset: qa.jsonl}}
    environment:
      id: docker
      run_network_policy: {policy}
"""


def _compile(project, write, policy: str):
    write("qa.jsonl", '{"question": "1+1", "answer": "2"}\n')
    write("orch.yaml", ORCH.format(policy=policy))
    return compile_orchestration("orch.yaml", environ={}, cwd=str(project))


@pytest.mark.parametrize(
    ("policy", "field", "words"),
    [
        ("{network_mode: denylist, allowed_hosts: [pypi.org]}", "allowed_hosts", "only used by `allowlist`"),
        ("{network_mode: public, allowed_hosts: [pypi.org]}", "allowed_hosts", "only used by `allowlist`"),
        ("{network_mode: allowlist, denied_hosts: [evil.example]}", "denied_hosts", "only used by `denylist`"),
        ("{network_mode: no-network, denied_hosts: [evil.example]}", "denied_hosts", "only used by `denylist`"),
        ("{network_mode: denylist}", "network_mode", "denies nothing"),
        ("denylist", "network_mode", "denies nothing"),
    ],
)
def test_policy_fields_that_do_not_fit_the_mode_are_located_errors(project, write, policy, field, words) -> None:
    # contract P7 (refused, never silently downgraded), R12 (located)
    with pytest.raises(AcxUserError) as info:
        _compile(project, write, policy)
    diags = [d for d in info.value.diagnostics if d.code == "E0204"]
    assert len(diags) == 1, [d.message for d in info.value.diagnostics]
    d = diags[0]
    assert d.path == f"environment.run_network_policy.{field}"
    assert words in d.message
    assert d.span is not None and d.span.file.endswith("orch.yaml") and d.span.line == 11


@pytest.mark.parametrize(
    "policy",
    [
        "{network_mode: denylist, denied_hosts: [evil.example]}",
        "{network_mode: allowlist, allowed_hosts: [pypi.org]}",
        "{network_mode: allowlist}",
        "no-network",
        "public",
    ],
)
def test_policies_that_fit_their_mode_compile(project, write, policy) -> None:  # contract P7
    compiled = _compile(project, write, policy)
    env = compiled.orchestration.requests[0].request.environment
    assert env.run_network_policy is not None


def test_acx_spec_denylist_with_allowed_hosts_points_at_the_policy(project, write) -> None:  # contract P7
    from acx.cli import main

    write("qa.jsonl", '{"question": "1+1", "answer": "2"}\n')
    write(
        "t.acx",
        """run q {
  benchmark exact_match { dataset = "qa.jsonl" }
  harness oracle {}
  environment docker {
    run_network_policy {
      network_mode = denylist
      allowed_hosts = ["pypi.org"]
    }
  }
}
""",
    )
    assert main(["compile", "t.acx"]) == 2
