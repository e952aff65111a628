"""A harness that needs a model, in a request that configures none, is refused when it is compiled
(E0306, located at the harness id) instead of ending every task FATAL ``model_failed`` at run time.
The exact rendering is the golden ``golden/model_required``."""

from __future__ import annotations

import pytest

from acx.cli import main
from acx.compiler import compile_orchestration, compile_run
from acx.errors import AcxUserError

_BENCH = "benchmark: {id: exact_match, dataset: qa.jsonl}"


def _spec(write, harness: str, model: str = "") -> str:
    lines = ["version: 1", "requests:", "  - name: r", f"    {_BENCH}", f"    harness: {harness}"]
    if model:
        lines.append(f"    model: {model}")
    return str(write("orch.yaml", "\n".join(lines) + "\n"))


@pytest.mark.parametrize(
    "harness",
    [
        "{id: react}",
        "{id: openai_chat}",
        "{id: installed_agent, agent: claude-code}",
        '{id: installed_agent, command: "x"}',
    ],
)
def test_model_harness_without_model_is_refused_at_compile(project, write, harness: str) -> None:  # contract R12
    path = _spec(write, harness)
    with pytest.raises(AcxUserError) as e:
        compile_orchestration(path, environ={})
    (d,) = e.value.diagnostics
    assert d.code == "E0306" and d.path == "requests[0].model"
    assert d.span is not None and (d.span.line, d.span.col) == (5, 19)  # the harness id
    assert "needs a model" in d.message and "model:" in (d.help or "")


@pytest.mark.parametrize(
    ("harness", "model"),
    [
        ("{id: react}", "{id: m}"),  # the endpoint is checked when the run starts (E0471)
        ("{id: react}", '{id: m, base_url: "${LLM_URL}"}'),  # resolved from the environment
        ("{id: openai_chat}", "{base_url: http://127.0.0.1:9/v1}"),
        ("{id: installed_agent, agent: codex}", "{roles: {agent: {id: m, base_url: http://127.0.0.1:9/v1}}}"),
        ('{id: command, command: "true"}', ""),  # needs no model
        ("{id: oracle}", ""),
    ],
)
def test_a_configured_model_or_a_modelless_harness_compiles(project, write, harness: str, model: str) -> None:
    path = _spec(write, harness, model)
    compiled = compile_orchestration(path, environ={"LLM_URL": "http://127.0.0.1:9/v1"})
    assert compiled.orchestration.requests[0].request.harness.id in harness


def test_acx_notation_is_located_and_helped_in_its_own_syntax(project, write) -> None:  # contract R12
    write("qa.jsonl", "")
    path = write(
        "eval.acx",
        """
        run quick {
          benchmark exact_match {
            dataset = "qa.jsonl"
          }
          harness react
        }
        """,
    )
    with pytest.raises(AcxUserError) as e:
        compile_orchestration(str(path), environ={})
    (d,) = e.value.diagnostics
    assert d.code == "E0306" and d.span is not None and d.span.line == 5
    assert "model {" in (d.help or "")


def test_single_run_without_model(project) -> None:  # contracts R8, R12
    with pytest.raises(AcxUserError) as e:
        compile_run("exact_match", "openai_chat", benchmark_params={"dataset": "qa.jsonl"}, environ={}, cwd=".")
    assert [d.code for d in e.value.diagnostics] == ["E0306"]
    assert "compile_run" in (e.value.diagnostics[0].help or "")


def test_acx_run_refuses_before_writing_anything(project, write, capsys) -> None:  # contract R12
    write("qa.jsonl", '{"id": "q1", "question": "1+1?", "answer": "2"}\n')
    path = _spec(write, "{id: react}")
    assert main(["run", path, "--results-dir", "results"]) == 2
    err = capsys.readouterr().err
    assert "orch.yaml:5:19: error[E0306]" in err and "Traceback" not in err
    assert not (project / "results").exists()
