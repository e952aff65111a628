"""W0306: the model-call cache's directory or size bound set while every role's `cache` is `off`
is accepted but has no effect, so compiling says so where it is written (nothing silently ignored;
issue 26, docs/errors.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acx.compiler import compile_orchestration

SPEC = """version: 1
name: c
requests:
  - name: qa
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: openai_chat}}
    model:
      id: m
      base_url: http://127.0.0.1:9/v1
{model}
    environment: {{id: host_process}}
"""


def _compile(tmp_path: Path, model: str) -> list:
    (tmp_path / "data.jsonl").write_text('{"id": "a", "question": "q", "answer": "1"}\n')
    path = tmp_path / "orch.yaml"
    path.write_text(SPEC.format(model=model))
    return [w for w in compile_orchestration(str(path)).warnings if w.code == "W0306"]


def test_a_cache_dir_with_every_role_off_is_a_located_warning(tmp_path: Path) -> None:
    warnings = _compile(tmp_path, "      cache_dir: /tmp/cache\n      cache_max_bytes: 1000")
    assert [w.path for w in warnings] == ["model.cache_dir", "model.cache_max_bytes"]
    assert warnings[0].span is not None and warnings[0].span.line == 10 and warnings[0].span.col == 7
    assert "no effect" in warnings[0].message and "cache: read-write" in (warnings[0].help or "")


@pytest.mark.parametrize(
    "model",
    [
        "      cache: read-write\n      cache_dir: /tmp/cache",
        "      cache_dir: /tmp/cache\n      roles: {grader: {id: g, base_url: 'http://127.0.0.1:9/v1', cache: read}}",
        "      cache: write",
    ],
)
def test_no_warning_when_a_role_uses_the_cache(tmp_path: Path, model: str) -> None:
    assert _compile(tmp_path, model) == []
