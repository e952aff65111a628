"""AgentCompass 1.0.1 harness ids (issue 23 item 5; contracts R7, R10, R12).

Each id AgentCompass ships either maps to an acx harness with its AgentCompass params translated
(``mini_swe_agent``/``claude_code``/``codex``/``openhands`` → ``installed_agent`` with the matching
``agent``; ``terminus2`` → acx's built-in ``terminus``), or is refused with E0301 naming the
nearest acx harness, what differs and what to use.
AgentCompass params acx has no meaning for are refused where they are written (E0311), unknown
ones like any unknown key (E0203) — nothing is silently ignored. The table is
``acx.components.HARNESS_ALIASES`` (one place, owned by the components package).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from acx.compiler import compile_orchestration, compile_run
from acx.components import HARNESS_ALIASES, HARNESSES
from acx.components._harness_aliases import MappedHarness, RefusedHarness
from acx.errors import AcxConfigError, AcxResolutionError

SRC = str(Path(__file__).resolve().parents[2] / "src")

#: Every harness id AgentCompass 1.0.1 registers (reference §2.11), besides `openai_chat` and `none`.
AGENTCOMPASS_IDS = {
    "claude_code",
    "codex",
    "mini_swe_agent",
    "naive_search_agent",
    "openclaw",
    "openevolve",
    "openhands",
    "qwen3vl_gui",
    "researchharness",
    "scicode_tool_use",
    "terminus2",
}

MAPPED = {
    "mini_swe_agent": "mini-swe-agent",
    "claude_code": "claude-code",
    "codex": "codex",
    "openhands": "openhands",
}
#: mapped ids whose target is a harness of acx's own, not an installed agent
MAPPED_BUILTIN = {"terminus2": "terminus"}
#: refused id → the nearest acx harness its message names
REFUSED = {
    "naive_search_agent": "react",
    "openclaw": "installed_agent",
    "openevolve": "command",
    "qwen3vl_gui": "react",
    "researchharness": "react",
    "scicode_tool_use": "react",
}

SPEC = """version: 1
name: ac
defaults:
  model: {{id: m, base_url: "http://127.0.0.1:9/v1"}}
  environment: {{id: host_process}}
requests:
  - name: r
    benchmark: {{id: exact_match, dataset: d.jsonl}}
    harness: {harness}
"""


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "d.jsonl").write_text('{"id": "1", "question": "1+1", "answer": "2"}\n')
    return tmp_path


def _compile(work: Path, harness: str, config: str | None = None) -> Any:
    (work / "s.yaml").write_text(SPEC.format(harness=harness))
    configs = []
    if config is not None:
        (work / "layer.yaml").write_text(config)
        configs = ["layer.yaml"]
    return compile_orchestration("s.yaml", configs=configs, cwd=str(work), environ={})


def _request(compiled: Any) -> Any:
    return compiled.orchestration.requests[0].request


def _acx(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "XDG_CONFIG_HOME": str(work / "xdg")}
    return subprocess.run(
        [sys.executable, "-m", "acx", *args], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )


# ---- the table ------------------------------------------------------------------------------------


def test_table_covers_every_agentcompass_harness_id() -> None:  # issue 23 item 5
    assert set(HARNESS_ALIASES) == AGENTCOMPASS_IDS
    assert {k for k, v in HARNESS_ALIASES.items() if isinstance(v, MappedHarness)} == set(MAPPED) | set(MAPPED_BUILTIN)
    for entry in HARNESS_ALIASES.values():
        if isinstance(entry, RefusedHarness):
            assert entry.nearest in HARNESSES and entry.differs and entry.help
        else:
            assert entry.target in HARNESSES
    # `openai_chat` stays acx's own harness, not an alias
    assert "openai_chat" in HARNESSES and "openai_chat" not in HARNESS_ALIASES


# ---- mapped ids -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("ac_id", "agent"), sorted(MAPPED.items()))
def test_mapped_id_compiles_to_installed_agent(work: Path, ac_id: str, agent: str) -> None:  # R12
    req = _request(_compile(work, f"{{id: {ac_id}}}"))
    assert req.harness.id == "installed_agent"
    assert req.harness.params["agent"] == agent
    assert req.metadata.harness_alias == ac_id  # the original id stays visible
    # the params are installed_agent's (validated by its config class)
    assert set(req.harness.params) == set(msgspec.structs.asdict(HARNESSES["installed_agent"].config_class()))


@pytest.mark.parametrize(
    ("harness", "install"),
    [
        # AgentCompass's default strategy install_if_missing: install only when not on PATH
        (
            "{id: mini_swe_agent}",
            "command -v mini >/dev/null 2>&1 || python3 -m pip install --no-input mini-swe-agent==2.4.5",
        ),
        (
            '{id: mini_swe_agent, version: "2.3.0"}',
            "command -v mini >/dev/null 2>&1 || python3 -m pip install --no-input mini-swe-agent==2.3.0",
        ),
        (
            "{id: mini_swe_agent, version: 2.3.0, install_command: 'pip install ./mini.whl'}",
            "command -v mini >/dev/null 2>&1 || pip install ./mini.whl",
        ),
        ("{id: mini_swe_agent, install_strategy: preinstalled}", "command -v mini"),
        ("{id: claude_code}", "command -v claude >/dev/null 2>&1 || npm install -g @anthropic-ai/claude-code"),
        ("{id: claude_code, install_strategy: preinstalled}", "command -v claude"),
        (
            "{id: codex, install_command: 'npm install -g @openai/codex@0.50.0'}",
            "command -v codex >/dev/null 2>&1 || npm install -g @openai/codex@0.50.0",
        ),
    ],
)
def test_install_params_are_translated(work: Path, harness: str, install: str) -> None:
    assert _request(_compile(work, harness)).harness.params["install"] == install


def test_openhands_keeps_the_definitions_install(work: Path) -> None:
    # acx runs the OpenHands CLI: AgentCompass's SDK version pin is not translated (refused if set)
    assert _request(_compile(work, "{id: openhands}")).harness.params["install"] is None


@pytest.mark.parametrize("ac_id", sorted(MAPPED))
def test_network_notice_is_translated(work: Path, ac_id: str) -> None:
    params = _request(_compile(work, f"{{id: {ac_id}, inject_network_restriction_notice: false}}")).harness.params
    assert params["inject_network_restriction_notice"] is False


def test_values_acx_behaves_as_are_accepted(work: Path) -> None:
    harness = "{id: codex, sandbox: read-only, wire_api: responses, dangerously_bypass_approvals_and_sandbox: true}"
    assert _request(_compile(work, harness)).harness.params["agent"] == "codex"
    harness = "{id: mini_swe_agent, launch_mode: remote, cost_tracking: ignore_errors, artifact_dir: ''}"
    assert _request(_compile(work, harness)).harness.params["agent"] == "mini-swe-agent"


def test_run_config_table_under_the_agentcompass_id(work: Path) -> None:  # R7, R10
    config = "harnesses:\n  mini_swe_agent:\n    version: '2.4.4'\n    inject_network_restriction_notice: false\n"
    compiled = _compile(work, "{id: mini_swe_agent}", config)
    params = _request(compiled).harness.params
    assert params["install"].endswith("mini-swe-agent==2.4.4")
    assert params["inject_network_restriction_notice"] is False
    chain = compiled.provenance["r"]["harness.params.install"]
    assert chain[-1].layer == "AgentCompass alias"
    assert any(c.source.startswith("layer.yaml:3:") for c in chain)


def test_single_run_takes_an_agentcompass_id(work: Path) -> None:  # R8
    compiled = compile_run(
        "exact_match",
        "claude_code",
        "m",
        benchmark_params={"dataset": "d.jsonl"},
        harness_params={"install_strategy": "preinstalled"},
        model_params={"base_url": "http://127.0.0.1:9/v1"},
        cwd=str(work),
        environ={},
    )
    req = _request(compiled)
    assert (req.harness.id, req.harness.params["install"]) == ("installed_agent", "command -v claude")
    assert req.metadata.harness_alias == "claude_code"


def test_provenance_shows_the_mapping(work: Path) -> None:
    prov = _compile(work, "{id: mini_swe_agent}").provenance["r"]
    chain = prov["harness.id"]
    assert chain[-2].value == "mini_swe_agent" and chain[-2].source.startswith("s.yaml:9:")
    assert chain[-1].value == "installed_agent"
    assert chain[-1].source == "harness `mini_swe_agent` (AgentCompass id) → installed_agent agent=mini-swe-agent"
    assert prov["harness.params.agent"][-1].value == "mini-swe-agent"


def test_terminus2_compiles_to_acx_terminus_with_its_params(work: Path) -> None:  # issue 23 item 3
    compiled = _compile(work, "{id: terminus2, max_turns: 12, tmux_pane_width: 200, tmux_pane_height: 50}")
    req = _request(compiled)
    assert req.harness.id == "terminus" and req.metadata.harness_alias == "terminus2"
    params = req.harness.params
    assert (params["max_turns"], params["pane_width"], params["pane_height"]) == (12, 200, 50)
    assert set(params) == set(msgspec.structs.asdict(HARNESSES["terminus"].config_class()))
    # AgentCompass's defaults compile unchanged (300 turns, 160x40), and its null max_turns is acx's bound.
    params = _request(_compile(work, "{id: terminus2}")).harness.params
    assert (params["max_turns"], params["pane_width"], params["pane_height"]) == (300, 160, 40)
    assert _request(_compile(work, "{id: terminus2, max_turns: null}")).harness.params["max_turns"] == 100000
    chain = compiled.provenance["r"]["harness.id"]
    assert chain[-1].source == "harness `terminus2` (AgentCompass id) → terminus"
    # AgentCompass's summarization defaults (on, 256000-token fallback window, 8000 free tokens).
    params = _request(_compile(work, "{id: terminus2}")).harness.params
    assert (params["summarize"], params["context_limit"], params["proactive_summarization_threshold"]) == (
        True,
        256000,
        8000,
    )


def test_terminus2_summarization_params_map_onto_terminus(work: Path) -> None:  # contracts R7, R10
    harness = "{id: terminus2, enable_summarize: true, fallback_context_limit: 32000, " + (
        "proactive_summarization_threshold: 2000}"
    )
    compiled = _compile(work, harness)
    params = _request(compiled).harness.params
    assert (params["summarize"], params["context_limit"], params["proactive_summarization_threshold"]) == (
        True,
        32000,
        2000,
    )
    prov = compiled.provenance["r"]
    assert prov["harness.params.context_limit"][-1].source.endswith("from terminus2 `fallback_context_limit`")
    assert _request(_compile(work, "{id: terminus2, enable_summarize: false}")).harness.params["summarize"] is False
    # Thresholds written beside enable_summarize: false would act on nothing: refused, saying why.
    with pytest.raises(AcxResolutionError) as info:
        _compile(work, "{id: terminus2, enable_summarize: false, fallback_context_limit: 32000}")
    (diag,) = info.value.diagnostics
    assert diag.code == "E0204" and diag.span is not None and diag.span.line == 9  # at the value written
    assert "context_limit acts only when summarize is true (AgentCompass: enable_summarize)" in diag.message
    # A threshold at or above the window would summarize every turn.
    with pytest.raises(AcxResolutionError) as info:
        _compile(work, "{id: terminus2, fallback_context_limit: 4000}")
    (diag,) = info.value.diagnostics
    assert "must be below context_limit (4000)" in diag.message


def test_explain_shows_the_terminus2_summarization_mapping(work: Path) -> None:
    (work / "t.yaml").write_text(SPEC.format(harness="{id: terminus2, proactive_summarization_threshold: 2000}"))
    proc = _acx(work, "explain", "t.yaml", "r", "harness.params.proactive_summarization_threshold")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "harness.params.proactive_summarization_threshold = 2000    (request r)"
    assert (
        "harness `terminus2` (AgentCompass id) → terminus; from terminus2 `proactive_summarization_threshold`"
        in (lines[1])
    )
    assert "t.yaml:" in proc.stdout  # the line that wrote it, shadowed by the mapping
    proc = _acx(work, "explain", "t.yaml", "r", "harness.params.summarize")
    assert proc.returncode == 0, proc.stderr
    assert "from terminus2 `enable_summarize`" in proc.stdout and "terminus default" in proc.stdout


# ---- refused params -------------------------------------------------------------------------------

_CANDIDATES: list[Any] = [
    "upload",
    "local",
    "gemini",
    "read-only",
    "poll",
    "vlm",
    "xml",
    "/opt/x",
    "x",
    False,
    True,
    7,
    1.5,
    ["d"],
    {"k": "v"},
]


def _bad_value(alias: MappedHarness, name: str, accepted: tuple[Any, ...]) -> Any:
    """A value of ``name``'s type that acx cannot honour (the AgentCompass default when none can)."""
    default = msgspec.to_builtins(getattr(alias.config(), name))
    for value in [default, *_CANDIDATES] if not accepted else _CANDIDATES:
        if value in accepted:
            continue
        try:
            msgspec.convert({name: value}, alias.config)
        except msgspec.ValidationError:
            continue
        return value
    raise AssertionError(f"no refused value for {alias.id}.{name}")


UNSUPPORTED = [
    (ac_id, name, accepted)
    for ac_id, entry in HARNESS_ALIASES.items()
    if isinstance(entry, MappedHarness)
    for name, (accepted, _) in entry.unsupported.items()
    # codex.sandbox: every value is moot under the bypass (docs/agents.md); terminus2.store_all_messages:
    # acx records every model call whatever it says — neither has a refused value.
    if (ac_id, name) not in (("codex", "sandbox"), ("terminus2", "store_all_messages"))
]


@pytest.mark.parametrize(("ac_id", "name", "accepted"), UNSUPPORTED, ids=[f"{a}.{n}" for a, n, _ in UNSUPPORTED])
def test_param_without_acx_meaning_is_refused_where_written(
    work: Path, ac_id: str, name: str, accepted: tuple[Any, ...]
) -> None:
    alias = HARNESS_ALIASES[ac_id]
    assert isinstance(alias, MappedHarness)
    value = json.dumps(_bad_value(alias, name, accepted))
    with pytest.raises(AcxResolutionError) as info:
        _compile(work, f"{{id: {ac_id}, {name}: {value}}}")
    (diag,) = [d for d in info.value.diagnostics if d.code == "E0311"]
    assert diag.path == f"harness.{name}"
    assert diag.span is not None and diag.span.line == 9  # file:line:col of the param
    assert f"`{ac_id}`" in diag.message and "no acx meaning" in diag.message
    assert diag.help


def test_refused_param_from_a_run_config_is_located_there(work: Path) -> None:
    with pytest.raises(AcxResolutionError) as info:
        _compile(work, "{id: mini_swe_agent}", "harnesses:\n  mini_swe_agent:\n    step_limit: 50\n")
    (diag,) = info.value.diagnostics
    assert diag.code == "E0311" and diag.span is not None
    assert (Path(diag.span.file).name, diag.span.line) == ("layer.yaml", 3)
    assert "max_model_calls" in diag.help


def test_unknown_agentcompass_param_is_refused_with_a_location(work: Path) -> None:
    with pytest.raises(AcxConfigError) as info:
        _compile(work, "{id: mini_swe_agent, max_steps: 3}")
    (diag,) = info.value.diagnostics
    assert diag.code == "E0203" and "mini_swe_agent" in diag.message and "`max_steps`" in diag.message
    assert diag.span is not None and (diag.span.line, diag.span.col) == (9, 35)
    assert "step_limit" in diag.help  # the AgentCompass params are the valid keys


def test_installed_agent_params_under_an_agentcompass_id_are_unknown(work: Path) -> None:
    with pytest.raises(AcxConfigError) as info:
        _compile(work, "{id: codex, install: 'true'}")
    assert [d.code for d in info.value.diagnostics] == ["E0203"]


# ---- refused ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("ac_id", "nearest"), sorted(REFUSED.items()))
def test_refused_id_is_E0301_naming_the_nearest_harness(work: Path, ac_id: str, nearest: str) -> None:
    (work / "s.yaml").write_text(SPEC.format(harness=f"{{id: {ac_id}}}"))
    proc = _acx(work, "compile", "s.yaml", "--dry-run")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"s.yaml:9:19: error[E0301]: AgentCompass harness `{ac_id}` has no acx equivalent" in proc.stderr
    assert f"the nearest acx harness is `{nearest}`" in proc.stderr
    assert "help: " in proc.stderr
    proc = _acx(work, "compile", "s.yaml", "--dry-run", "--format", "json")
    assert proc.returncode == 2
    (diag,) = json.loads(proc.stdout)["diagnostics"]
    assert diag["code"] == "E0301" and f"`{nearest}`" in diag["message"] and diag["help"]


def test_refused_id_in_a_run_config_table(work: Path) -> None:
    (work / "c.yaml").write_text("harnesses:\n  qwen3vl_gui: {}\n")
    proc = _acx(work, "validate", "c.yaml")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "c.yaml:2:3: error[E0301]" in proc.stderr and "`react`" in proc.stderr


# ---- an AgentCompass orchestration, unchanged, through the real CLI --------------------------------

AGENTCOMPASS_ORCH = """\
version: 1
name: nightly
task_concurrency: 4
defaults:
  harness: {id: mini_swe_agent}
  environment: {id: host_process}
  model:
    id: my-model
    base_url: http://127.0.0.1:9/v1
    api_protocol: openai-chat
  execution: {attempts: {k: 1, strategy: avg}, max_retries: 0}
requests:
  - name: mini
    benchmark: {id: exact_match, dataset: d.jsonl}
  - name: claude
    benchmark: {id: exact_match, dataset: d.jsonl}
    harness: {id: claude_code, install_strategy: preinstalled}
  - name: codex
    benchmark: {id: exact_match, dataset: d.jsonl}
    harness: {id: codex, sandbox: danger-full-access}
"""

AGENTCOMPASS_CONFIG = """\
harnesses:
  mini_swe_agent:
    inject_network_restriction_notice: true
"""


def test_agentcompass_orchestration_compiles_unchanged_and_explain_shows_each_mapping(work: Path) -> None:
    (work / "orch.yaml").write_text(AGENTCOMPASS_ORCH)
    (work / "config.yaml").write_text(AGENTCOMPASS_CONFIG)  # the project config, as AgentCompass reads it
    proc = _acx(work, "compile", "orch.yaml", "--dry-run", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    requests = {r["name"]: r for r in json.loads(proc.stdout)["requests"]}
    for name, ac_id, agent in [
        ("mini", "mini_swe_agent", "mini-swe-agent"),
        ("claude", "claude_code", "claude-code"),
        ("codex", "codex", "codex"),
    ]:
        req = requests[name]
        assert req["harness"]["id"] == "installed_agent"
        assert req["harness"]["params"]["agent"] == agent
        assert req["metadata"]["harness_alias"] == ac_id
        proc = _acx(work, "explain", "orch.yaml", name, "harness")
        assert proc.returncode == 0, proc.stderr
        assert f"harness `{ac_id}` (AgentCompass id) → installed_agent agent={agent}" in proc.stdout
        first = proc.stdout.splitlines()[0]
        assert first == f'harness.id = "installed_agent"    (request {name})'
    # planning accepts the mapped harness too (acx compile --plans makes every task's plan)
    proc = _acx(work, "compile", "orch.yaml", "--plans")
    assert proc.returncode == 0, proc.stderr


EXPLAIN_GOLDEN = Path(__file__).parent / "golden_explain" / "agentcompass_harness.txt"


def test_explain_golden(work: Path) -> None:
    (work / "orch.yaml").write_text(AGENTCOMPASS_ORCH)
    out = []
    for name, field in [
        ("mini", "harness.id"),
        ("claude", "harness.params.install"),
        ("codex", "harness.params.agent"),
    ]:
        proc = _acx(work, "explain", "orch.yaml", name, field)
        assert proc.returncode == 0, proc.stderr
        out.append(proc.stdout)
    text = "".join(out)
    if os.environ.get("ACX_UPDATE_GOLDEN") == "1":
        EXPLAIN_GOLDEN.parent.mkdir(exist_ok=True)
        EXPLAIN_GOLDEN.write_text(text, encoding="utf-8")
    assert text == EXPLAIN_GOLDEN.read_text(encoding="utf-8")


def test_config_docs_knows_agentcompass_ids(work: Path) -> None:
    proc = _acx(work, "config", "docs", "harness", "mini_swe_agent")
    assert proc.returncode == 0, proc.stderr
    assert "step_limit" in proc.stdout and '"2.4.5"' in proc.stdout
    proc = _acx(work, "config", "docs", "harness", "openevolve")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "error[E0301]" in proc.stderr and "`command`" in proc.stderr


def test_acx_spec_takes_an_agentcompass_id(work: Path) -> None:  # the .acx front end lowers to the same request
    (work / "s.acx").write_text(
        'run q {\n  benchmark exact_match {\n    dataset = "d.jsonl"\n  }\n'
        "  harness mini_swe_agent {\n    install_strategy = preinstalled\n  }\n"
        '  model m {\n    base_url = "http://127.0.0.1:9/v1"\n  }\n}\n'
    )
    req = _request(compile_orchestration("s.acx", cwd=str(work), environ={}))
    assert (req.harness.id, req.harness.params["install"]) == ("installed_agent", "command -v mini")
    assert req.metadata.harness_alias == "mini_swe_agent"
