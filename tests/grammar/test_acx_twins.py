"""One resolver, two front ends: each examples/<name>.acx and its YAML twin are the same spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acx.cli import main
from acx.compiler._frontends import load_document

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TWINS = sorted(p.stem for p in EXAMPLES.glob("*.acx") if p.with_suffix(".yaml").exists())
ENV = {"MODEL_BASE_URL": "http://127.0.0.1:9", "MODEL_API_KEY": "sk-test-not-printed", "HF_TOKEN": "hf-test"}


def test_there_are_twins() -> None:
    assert len(TWINS) >= 3


@pytest.mark.parametrize("name", TWINS)
def test_twins_lower_to_identical_data(name: str) -> None:
    # contract R1, R7, R10: the .acx front end produces exactly the YAML data shape
    acx_doc = load_document(str(EXAMPLES / f"{name}.acx"))
    yaml_doc = load_document(str(EXAMPLES / f"{name}.yaml"))
    assert acx_doc.kind == yaml_doc.kind
    assert acx_doc.data == yaml_doc.data


def _dry_run(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code = main(["compile", "--dry-run", "--format", "json", path.name])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)  # type: ignore[no-any-return]


def _without_spec_path(value: object) -> object:
    """Provenance aside: the only difference allowed is which files the values came from."""
    if isinstance(value, dict):
        return {k: _without_spec_path(v) for k, v in value.items() if k not in ("spec_path", "config_path")}
    if isinstance(value, list):
        return [_without_spec_path(v) for v in value]
    return value


ORCHESTRATIONS = [n for n in TWINS if load_document(str(EXAMPLES / f"{n}.acx")).kind == "orchestration"]


@pytest.mark.parametrize("name", ORCHESTRATIONS)
def test_twins_compile_to_identical_dry_run_json(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("acx.cli._compile", reason="`acx compile` is not available in this build")
    monkeypatch.chdir(EXAMPLES)
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    from_acx = _dry_run(EXAMPLES / f"{name}.acx", capsys)
    from_yaml = _dry_run(EXAMPLES / f"{name}.yaml", capsys)
    assert _without_spec_path(from_acx) == _without_spec_path(from_yaml)
    assert "sk-test-not-printed" not in json.dumps(from_acx)  # secrets stay references


def test_run_config_twins_layer_identically(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("acx.cli._compile", reason="`acx compile` is not available in this build")
    monkeypatch.chdir(EXAMPLES)
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    outputs = []
    for config in ("run-config.acx", "run-config.yaml"):
        assert main(["compile", "--dry-run", "--format", "json", "--config", config, "nightly.acx"]) == 0
        outputs.append(_without_spec_path(json.loads(capsys.readouterr().out)))
    assert outputs[0] == outputs[1]


def test_provenance_points_into_acx_spans(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("acx.cli._explain", reason="`acx explain` is not available in this build")
    monkeypatch.chdir(EXAMPLES)
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    assert main(["explain", "nightly.acx", "qa-glm-4.6", "execution.run_timeout_seconds"]) == 0
    out = capsys.readouterr().out
    text = (EXAMPLES / "nightly.acx").read_text().splitlines()
    line = next(i for i, ln in enumerate(text, 1) if "run_timeout = 10m" in ln)
    col = text[line - 1].index("10m") + 1
    assert f"nightly.acx:{line}:{col}" in out
