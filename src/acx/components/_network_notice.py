"""The network-restriction notice appended to the agent's prompt when egress is restricted."""

from __future__ import annotations

from acx.ir import ExecutionPlan

__all__ = ["NETWORK_NOTICE", "with_network_notice"]

NETWORK_NOTICE = (
    "<IMPORTANT> Network Restriction Statement: this environment's network access is restricted "
    "({mode}{hosts}). Do not rely on downloading packages or data from the internet. </IMPORTANT>"
)


def with_network_notice(prompt: str, plan: ExecutionPlan) -> str:
    """Append the notice for a non-public run policy unless the harness disabled it."""
    policy = plan.run_network_policy
    if policy is None or policy.network_mode == "public":
        return prompt
    if not plan.harness_plan.inject_network_restriction_notice:
        return prompt
    hosts = f"; allowed: {', '.join(policy.allowed_hosts)}" if policy.allowed_hosts else ""
    notice = NETWORK_NOTICE.format(mode=policy.network_mode, hosts=hosts)
    return f"{prompt}\n\n{notice}" if prompt else notice
