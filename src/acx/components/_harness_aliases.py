"""AgentCompass 1.0.1 harness ids, as aliases of acx harnesses (issue 23 item 5).

The one table of them: an id AgentCompass ships is either **mapped** — it names an acx harness
with its AgentCompass params translated — or **refused** — acx has no equivalent, and the refusal
(E0301) names the nearest acx harness, what differs and what to use. The compiler reads this
table when it validates and resolves a harness id (``acx.compiler``); nothing else keeps a list.

A mapped id takes the AgentCompass params of that harness (typed below, AgentCompass defaults,
unknown keys refused). Each param is either translated into the acx harness's params, or accepted
only at the values acx behaves as (anything else is E0311 at the param, never silently ignored).

Pure data and msgspec types: imported at plan time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import msgspec

from acx.components._configs import HarnessConfig

__all__ = [
    "HARNESS_ALIASES",
    "MappedHarness",
    "RefusedHarness",
    "Translated",
    "harness_alias",
    "mapped_harness",
]


def _d(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


InstallStrategy = Literal["preinstalled", "install_if_missing", "upload"]

# ---- AgentCompass 1.0.1 params (agentcompass/harnesses/*.py), AgentCompass defaults ----------------


class AcClaudeCodeConfig(HarnessConfig, frozen=True, kw_only=True):
    """AgentCompass `claude_code` params (agentcompass/harnesses/claude_code.py)."""

    binary: Annotated[str, _d("executable name or path")] = "claude"
    install_strategy: Annotated[InstallStrategy, _d("how to prepare the executable")] = "install_if_missing"
    install_command: Annotated[str, _d("install command")] = "npm install -g @anthropic-ai/claude-code"
    upload_src: Annotated[str, _d("local file uploaded by the upload strategy")] = ""
    upload_dst: Annotated[str, _d("target path of the upload strategy")] = "/usr/bin/claude"
    setup_capsule_tag: Annotated[str, _d("toolchain capsule tag")] = ""
    max_turns: Annotated[int, msgspec.Meta(ge=1, description="maximum agent turns")] = 400
    max_output_tokens: Annotated[int | None, _d("maximum output tokens of one response")] = None
    append_system_prompt: Annotated[str, _d("appended system prompt")] = ""
    dangerously_skip_permissions: Annotated[bool, _d("pass --dangerously-skip-permissions")] = True


class AcCodexConfig(HarnessConfig, frozen=True, kw_only=True):
    """AgentCompass `codex` params (agentcompass/harnesses/codex.py)."""

    binary: Annotated[str, _d("executable name or path")] = "codex"
    install_strategy: Annotated[InstallStrategy, _d("how to prepare the executable")] = "install_if_missing"
    install_command: Annotated[str, _d("install command")] = "npm install -g @openai/codex"
    upload_src: Annotated[str, _d("local file uploaded by the upload strategy")] = ""
    upload_dst: Annotated[str, _d("target path of the upload strategy")] = "/usr/bin/codex"
    setup_capsule_tag: Annotated[str, _d("toolchain capsule tag")] = ""
    sandbox: Annotated[Literal["read-only", "workspace-write", "danger-full-access"], _d("codex sandbox policy")] = (
        "workspace-write"
    )
    wire_api: Annotated[Literal["responses"], _d("wire protocol of the custom provider")] = "responses"
    reasoning_effort: Annotated[str, _d("model reasoning effort")] = ""
    dangerously_bypass_approvals_and_sandbox: Annotated[bool, _d("pass --dangerously-bypass-approvals-and-sandbox")] = (
        True
    )


class AcMiniSweAgentConfig(HarnessConfig, frozen=True, kw_only=True):
    """AgentCompass `mini_swe_agent` params (agentcompass/harnesses/mini_swe_agent/harness.py)."""

    binary: Annotated[str, _d("executable name or path")] = "mini"
    version: Annotated[str, _d("mini-swe-agent version installed")] = "2.4.5"
    launch_mode: Annotated[Literal["remote", "local"], _d("remote: in the sandbox; local: on the host")] = "local"
    install_strategy: Annotated[Literal["preinstalled", "install_if_missing"], _d("how to prepare the executable")] = (
        "install_if_missing"
    )
    install_command: Annotated[str, _d("install command; empty: a version-pinned pip install")] = ""
    step_limit: Annotated[int, msgspec.Meta(ge=1, description="maximum step count")] = 250
    cost_limit: Annotated[float, msgspec.Meta(gt=0, description="cost limit")] = 3.0
    cost_tracking: Annotated[str, _d("cost tracking policy")] = "ignore_errors"
    interleaved_thinking: Annotated[bool, _d("return reasoning state in later requests")] = False
    command_timeout: Annotated[int | None, _d("timeout of one command, seconds")] = 2400
    artifact_dir: Annotated[str, _d("directory of the harness config and trajectories")] = ""


class AcOpenHandsConfig(HarnessConfig, frozen=True, kw_only=True):
    """AgentCompass `openhands` params (agentcompass/harnesses/openhands/harness.py)."""

    openhands_version: Annotated[str, _d("OpenHands SDK/tools version")] = "1.23.0"
    setup_capsule_tag: Annotated[str, _d("toolchain capsule tag")] = ""
    tool_preset: Annotated[Literal["default", "gemini", "gpt5", "planning"], _d("tool preset")] = "default"
    max_iterations: Annotated[int, msgspec.Meta(ge=1, description="maximum conversation iterations")] = 250
    conversation_timeout: Annotated[int, msgspec.Meta(ge=1, description="timeout of one LLM request, seconds")] = 3600
    command_timeout: Annotated[int | None, _d("terminal command timeout, seconds")] = 1800
    terminal_no_change_timeout_seconds: Annotated[int, _d("soft timeout when terminal output stops changing")] = 600
    terminal_max_output_size: Annotated[int, _d("terminal output characters returned to the agent")] = 200000
    enable_condenser: Annotated[bool, _d("LLM summarizing condenser")] = True
    interleaved_thinking: Annotated[bool, _d("return reasoning state in later requests")] = False
    condenser_max_size: Annotated[int, _d("maximum context events of the condenser")] = 240
    condenser_keep_first: Annotated[int, _d("earliest events kept by the condenser")] = 2
    skill_dirs: Annotated[list[str] | None, _d("skill directories")] = None


class AcTerminus2Config(HarnessConfig, frozen=True, kw_only=True):
    """AgentCompass `terminus2` params (agentcompass/harnesses/terminus2/terminus_2.py)."""

    endpoint: Annotated[str, _d("optional service entrypoint URL")] = ""
    service_url: Annotated[str, _d("alias for endpoint")] = ""
    url: Annotated[str, _d("alias for endpoint")] = ""
    headers: Annotated[dict[str, str], _d("HTTP headers added to service requests")] = {}
    service_headers: Annotated[dict[str, str], _d("alias for headers")] = {}
    request_timeout: Annotated[int, msgspec.Meta(ge=1, description="service request timeout, seconds")] = 3600
    service_protocol: Annotated[Literal["wait", "poll"], _d("service completion protocol")] = "wait"
    modality: Annotated[Literal["llm", "vlm"], _d("agent modality")] = "llm"
    service_env_params: Annotated[dict[str, Any], _d("extra environment parameters for the service layer")] = {}
    agent_setup_timeout_sec: Annotated[float, msgspec.Meta(gt=0, description="agent setup timeout, seconds")] = 1800
    parser_name: Annotated[Literal["json", "xml", "tool_call"] | None, _d("response parser")] = "json"
    max_turns: Annotated[Annotated[int, msgspec.Meta(ge=1)] | None, _d("maximum agent turns")] = 300
    session_id: Annotated[str | None, _d("explicit session id")] = None
    record_terminal_session: Annotated[bool, _d("record the terminal session when supported")] = False
    enable_summarize: Annotated[bool, _d("proactive and context-length summarization")] = True
    fallback_context_limit: Annotated[int, msgspec.Meta(ge=1, description="fallback token limit")] = 256000
    proactive_summarization_threshold: Annotated[
        int, msgspec.Meta(ge=1, description="free-token threshold that triggers summarization")
    ] = 8000
    tmux_pane_width: Annotated[int, msgspec.Meta(ge=1, description="tmux pane width")] = 160
    tmux_pane_height: Annotated[int, msgspec.Meta(ge=1, description="tmux pane height")] = 40
    trajectory_config: Annotated[dict[str, Any], _d("trajectory options (raw_content, linear_history)")] = {}
    store_all_messages: Annotated[bool, _d("store all model messages in result metadata")] = False
    interleaved_thinking: Annotated[bool, _d("interleaved thinking for compatible models")] = False
    skills_dir: Annotated[str | bool, _d("skills directory path")] = False
    mcp_servers: Annotated[list[Any], _d("MCP server configuration list")] = []


# ---- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Translated:
    """One acx param produced from AgentCompass params: its value and the params it came from."""

    value: Any
    sources: tuple[str, ...]


@dataclass(frozen=True)
class MappedHarness:
    """An AgentCompass id that compiles to an acx harness (``target``) with ``fixed`` params plus
    what ``translate`` makes of the AgentCompass params (typed by ``config``)."""

    id: str
    target: str
    fixed: Mapping[str, Any]
    config: type[HarnessConfig]
    translate: Callable[[Any], dict[str, Translated]]
    #: AgentCompass param → (values acx behaves as, what to do instead): any other value is E0311.
    unsupported: Mapping[str, tuple[tuple[Any, ...], str]] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """``installed_agent agent=mini-swe-agent``: what the id maps to, for messages and provenance."""
        return " ".join([self.target, *(f"{k}={v}" for k, v in self.fixed.items())])


@dataclass(frozen=True)
class RefusedHarness:
    """An AgentCompass id acx has no equivalent of."""

    id: str
    nearest: str
    differs: str
    help: str


def _notice(cfg: Any) -> dict[str, Translated]:
    return {
        "inject_network_restriction_notice": Translated(
            cfg.inject_network_restriction_notice, ("inject_network_restriction_notice",)
        )
    }


def _install(binary: str, strategy: str, command: str, sources: tuple[str, ...]) -> Translated:
    """AgentCompass's install strategies as an acx ``install`` command (run in phase install_agent):
    ``install_if_missing`` installs only when ``binary`` is not on PATH; ``preinstalled`` checks
    that it is (AgentCompass fails its validation otherwise, acx fails the install phase)."""
    if strategy == "preinstalled":
        return Translated(f"command -v {binary}", sources)
    return Translated(f"command -v {binary} >/dev/null 2>&1 || {command}", sources)


_INSTALL_SOURCES = ("install_strategy", "install_command")


def _cli_agent(cfg: Any) -> dict[str, Translated]:
    return {
        **_notice(cfg),
        "install": _install(cfg.binary, cfg.install_strategy, cfg.install_command, _INSTALL_SOURCES),
    }


def _mini(cfg: AcMiniSweAgentConfig) -> dict[str, Translated]:
    command = cfg.install_command or f"python3 -m pip install --no-input mini-swe-agent=={cfg.version}"
    install = _install(cfg.binary, cfg.install_strategy, command, ("version", *_INSTALL_SOURCES))
    return {**_notice(cfg), "install": install}


def _openhands(cfg: AcOpenHandsConfig) -> dict[str, Translated]:
    return _notice(cfg)


#: acx's terminus has max_turns ≤ 100000; AgentCompass's null (unbounded) becomes that bound.
_TERMINUS_MAX_TURNS = 100000


def _terminus(cfg: AcTerminus2Config) -> dict[str, Translated]:
    turns = _TERMINUS_MAX_TURNS if cfg.max_turns is None else min(cfg.max_turns, _TERMINUS_MAX_TURNS)
    return {
        **_notice(cfg),
        "max_turns": Translated(turns, ("max_turns",)),
        "pane_width": Translated(max(cfg.tmux_pane_width, 20), ("tmux_pane_width",)),
        "pane_height": Translated(max(cfg.tmux_pane_height, 5), ("tmux_pane_height",)),
        # acx looks no model's context window up (AgentCompass asks litellm's model table first):
        # AgentCompass's fallback is the window acx's terminus always uses.
        "summarize": Translated(cfg.enable_summarize, ("enable_summarize",)),
        "context_limit": Translated(cfg.fallback_context_limit, ("fallback_context_limit",)),
        "proactive_summarization_threshold": Translated(
            cfg.proactive_summarization_threshold, ("proactive_summarization_threshold",)
        ),
    }


_COMMAND = "set installed_agent `command` (harness id `installed_agent`, agent = {agent!r}) with the flag you need"


def _binary(agent: str, name: str) -> tuple[tuple[Any, ...], str]:
    return (
        name,
    ), f"acx's `{agent}` definition runs `{name}` from PATH; to run another executable, " + _COMMAND.format(agent=agent)


def _upload(agent: str) -> tuple[tuple[Any, ...], str]:
    return (
        ("preinstalled", "install_if_missing"),
        f"upload the executable with installed_agent `upload` and install it with `install` (agent = {agent!r})",
    )


_T_SERVICE = "acx's terminus calls the model through the run's gateway, not a Terminus service: remove it"
_CAPSULE = (("",), "acx has no toolchain capsules: bake the agent's runtime into the image (environment.setup.image)")
_MAX_CALLS = "bound the agent in acx's model gateway with `model.limits.max_model_calls`"


HARNESS_ALIASES: dict[str, MappedHarness | RefusedHarness] = {
    "claude_code": MappedHarness(
        id="claude_code",
        target="installed_agent",
        fixed={"agent": "claude-code"},
        config=AcClaudeCodeConfig,
        translate=_cli_agent,
        unsupported={
            "binary": _binary("claude-code", "claude"),
            "install_strategy": _upload("claude-code"),
            "upload_src": (("",), "the upload strategy is not supported: use installed_agent `upload` + `install`"),
            "upload_dst": (("/usr/bin/claude",), "the upload strategy is not supported: use installed_agent `upload`"),
            "setup_capsule_tag": _CAPSULE,
            "max_turns": ((), f"{_MAX_CALLS}, or {_COMMAND.format(agent='claude-code')} (`--max-turns N`)"),
            "max_output_tokens": (
                (None,),
                "set CLAUDE_CODE_MAX_OUTPUT_TOKENS in `environment.run_env_variables` (agent variables live there, V4)",
            ),
            "append_system_prompt": (("",), _COMMAND.format(agent="claude-code") + " (`--append-system-prompt`)"),
            "dangerously_skip_permissions": (
                (True,),
                "acx's claude-code definition always skips permissions (the acx sandbox is the agent's)",
            ),
        },
    ),
    "codex": MappedHarness(
        id="codex",
        target="installed_agent",
        fixed={"agent": "codex"},
        config=AcCodexConfig,
        translate=_cli_agent,
        unsupported={
            "binary": _binary("codex", "codex"),
            "install_strategy": _upload("codex"),
            "upload_src": (("",), "the upload strategy is not supported: use installed_agent `upload` + `install`"),
            "upload_dst": (("/usr/bin/codex",), "the upload strategy is not supported: use installed_agent `upload`"),
            "setup_capsule_tag": _CAPSULE,
            # With the bypass on (AgentCompass's default, and acx's only mode), codex applies no
            # sandbox whatever `sandbox` says; acx runs it with `--sandbox danger-full-access`.
            "sandbox": (("read-only", "workspace-write", "danger-full-access"), ""),
            "reasoning_effort": (("",), _COMMAND.format(agent="codex") + " (`-c model_reasoning_effort=...`)"),
            "dangerously_bypass_approvals_and_sandbox": (
                (True,),
                "acx's codex definition always runs without codex's own sandbox (the acx sandbox is the agent's)",
            ),
        },
    ),
    "mini_swe_agent": MappedHarness(
        id="mini_swe_agent",
        target="installed_agent",
        fixed={"agent": "mini-swe-agent"},
        config=AcMiniSweAgentConfig,
        translate=_mini,
        unsupported={
            "binary": _binary("mini-swe-agent", "mini"),
            "launch_mode": (
                ("remote",),
                "acx runs mini-swe-agent inside the sandbox (AgentCompass `launch_mode: remote`); drop "
                "`launch_mode`, or use harness `react` for an agent loop on the host",
            ),
            "step_limit": ((), f"{_MAX_CALLS} (one model call per step)"),
            "cost_limit": ((), "bound the attempt's cost in acx's model gateway with `model.limits.max_cost_usd`"),
            "cost_tracking": (
                ("ignore_errors",),
                "acx's mini-swe-agent definition sets MSWEA_COST_TRACKING=ignore_errors; "
                "override it in `environment.run_env_variables`",
            ),
            "interleaved_thinking": ((False,), "not supported by acx's mini-swe-agent definition"),
            "command_timeout": (
                (),
                "acx bounds the whole run with `execution.run_timeout_seconds`; a per-command timeout needs "
                "mini-swe-agent's own config: " + _COMMAND.format(agent="mini-swe-agent") + " (`-c FILE`)",
            ),
            "artifact_dir": (
                ("",),
                "acx's definition writes the agent's trajectory to /logs/agent (collected as `logs`)",
            ),
        },
    ),
    "openhands": MappedHarness(
        id="openhands",
        target="installed_agent",
        fixed={"agent": "openhands"},
        config=AcOpenHandsConfig,
        translate=_openhands,
        unsupported={
            "openhands_version": (
                (),
                "acx runs the OpenHands CLI (`pip install openhands`), not AgentCompass's SDK runner, whose "
                "version this pins: pin the CLI in installed_agent `install` (harness id `installed_agent`)",
            ),
            "setup_capsule_tag": _CAPSULE,
            "tool_preset": (("default",), "acx's openhands definition runs the CLI's default tools"),
            "max_iterations": ((), _MAX_CALLS),
            "conversation_timeout": ((), "set the model's `request_timeout_seconds` (the `model` section)"),
            "command_timeout": ((), "acx bounds the whole run with `execution.run_timeout_seconds`"),
            "terminal_no_change_timeout_seconds": ((), "not configurable in acx's openhands definition"),
            "terminal_max_output_size": ((), "not configurable in acx's openhands definition"),
            "enable_condenser": ((), "not configurable in acx's openhands definition"),
            "condenser_max_size": ((), "not configurable in acx's openhands definition"),
            "condenser_keep_first": ((), "not configurable in acx's openhands definition"),
            "interleaved_thinking": ((False,), "not supported by acx's openhands definition"),
            "skill_dirs": ((None, []), "upload skills with installed_agent `upload` (harness id `installed_agent`)"),
        },
    ),
    "terminus2": MappedHarness(
        id="terminus2",
        target="terminus",
        fixed={},
        config=AcTerminus2Config,
        translate=_terminus,
        unsupported={
            "endpoint": (("",), _T_SERVICE),
            "service_url": (("",), _T_SERVICE),
            "url": (("",), _T_SERVICE),
            "headers": (({},), _T_SERVICE),
            "service_headers": (({},), _T_SERVICE),
            "service_protocol": (("wait",), _T_SERVICE),
            "service_env_params": (({},), _T_SERVICE),
            "request_timeout": ((), "set the model's `request_timeout_seconds` (the `model` section)"),
            "modality": (("llm",), "acx's terminus reads the terminal as text (no screenshots)"),
            "agent_setup_timeout_sec": ((), "acx's terminus installs nothing: tmux must be in the image"),
            "parser_name": (("json", None), "acx's terminus speaks Terminus's JSON reply format only"),
            "session_id": ((None,), "acx names the tmux session itself"),
            "record_terminal_session": (
                (False,),
                "acx keeps the terminal's final scrollback in telemetry.agent_logs.terminal; no asciinema recording",
            ),
            "trajectory_config": (({},), "acx's trajectory comes from the gateway's record of the model calls"),
            # Either value: acx records every model call of the attempt anyway (model_calls.json).
            "store_all_messages": ((False, True), "acx always records every model call (model_calls.json)"),
            "interleaved_thinking": ((False,), "not supported by acx's terminus"),
            "skills_dir": ((False, ""), "acx's terminus adds no skills section to the prompt"),
            "mcp_servers": (([],), "acx's terminus offers no MCP servers"),
        },
    ),
    "naive_search_agent": RefusedHarness(
        id="naive_search_agent",
        nearest="react",
        differs="naive_search_agent answers with web search and page fetch tools; acx's `react` has no search "
        "tool (bash, python, edit, submit only)",
        help="use harness `react` with a run network policy that lets it fetch pages with bash, or package a "
        "search agent as an `installed_agent` / `command` harness",
    ),
    "openclaw": RefusedHarness(
        id="openclaw",
        nearest="installed_agent",
        differs="acx ships no OpenClaw definition (installed_agent agents: mini-swe-agent, claude-code, codex, "
        "opencode, aider, openhands)",
        help="run OpenClaw with harness `installed_agent`, giving its `install` and `command`",
    ),
    "openevolve": RefusedHarness(
        id="openevolve",
        nearest="command",
        differs="OpenEvolve is an evolutionary search loop over programs with its own evaluator; acx has no "
        "harness for it (`command` runs one program on the task)",
        help="run OpenEvolve as harness `command` (or `installed_agent`) with its command line",
    ),
    "qwen3vl_gui": RefusedHarness(
        id="qwen3vl_gui",
        nearest="react",
        differs="qwen3vl_gui is a GUI agent acting on screenshots (mouse, keyboard) for OSWorld-style desktops; "
        "acx's `react` has text tools only and acx has no GUI environment",
        help="acx runs no GUI agents; use harness `react` for terminal tasks",
    ),
    "researchharness": RefusedHarness(
        id="researchharness",
        nearest="react",
        differs="ResearchHarness is a deep-research agent with web search, browsing and report tools; acx's "
        "`react` has no search or browsing tools",
        help="use harness `react` for tool use in the sandbox, or package the research agent as `installed_agent`",
    ),
    "scicode_tool_use": RefusedHarness(
        id="scicode_tool_use",
        nearest="react",
        differs="scicode_tool_use is SciCode's step-by-step code-writing loop with a Python tool and SciCode's "
        "prompts; acx's `react` is a general tool-calling loop without SciCode's step prompts",
        help="use harness `react` (its `python` tool runs code in the sandbox) with a `prompt_template` of your own",
    ),
}


def harness_alias(cid: object) -> MappedHarness | RefusedHarness | None:
    """The AgentCompass entry of harness id ``cid`` (None: not an AgentCompass-only id)."""
    return HARNESS_ALIASES.get(cid) if isinstance(cid, str) else None


def mapped_harness(cid: object) -> MappedHarness | None:
    """The mapping of ``cid`` when it is an AgentCompass id acx maps to a harness of its own."""
    entry = harness_alias(cid)
    return entry if isinstance(entry, MappedHarness) else None
