"""Committed JSON Schemas: generated from the types, valid 2020-12, agreeing with the validator."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from acx.compiler._yaml import parse_yaml_text
from acx.schemas import SCHEMA_FILES, generate_schemas, load_schema

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "src" / "acx" / "schemas"


@pytest.mark.parametrize("name", sorted(SCHEMA_FILES))
def test_committed_schema_matches_the_types(name: str) -> None:
    committed = json.loads((SCHEMA_DIR / SCHEMA_FILES[name]).read_text(encoding="utf-8"))
    assert committed == generate_schemas()[name], (
        f"{SCHEMA_FILES[name]} drifted from the types; regenerate with `acx schema --out src/acx/schemas`"
    )


@pytest.mark.parametrize("name", sorted(SCHEMA_FILES))
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    schema = load_schema(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


GOOD_ORCH = """
version: 1
name: n
task_concurrency: 4
runtime: {results_dir: out, provider_limits: {docker: 2}}
defaults:
  harness: {id: openai_chat, temperature: 0}
  environment: {id: docker, run_network_policy: no-network, setup: {image: "python:3.12"}}
  model: {id: m, api_protocol: openai-chat}
  execution: {attempts: {k: 2, strategy: pass}, artifacts: [/logs/out, {source: /app, exclude: ["*.tmp"]}]}
requests:
  - name: qa
    benchmark: {id: exact_match, dataset: qa.jsonl}
  - name: tb
    benchmark: {id: harbor, path: tasks}
    harness: {id: oracle}
"""
GOOD_CONFIG = """
runtime: {reuse: true, progress: plain}
execution: {task_concurrency: 8, max_retries: 1}
benchmarks: {exact_match: {case_sensitive: true}}
environments: {docker: {pull: missing, env_variables: {A: "1"}}, host_process: null}
"""


@pytest.mark.parametrize(
    ("name", "text", "valid"),
    [
        ("orchestration", GOOD_ORCH, True),
        ("run_config", GOOD_CONFIG, True),
        ("orchestration", GOOD_ORCH.replace("max_retries", "x") + "bogus: 1\n", False),
        ("orchestration", GOOD_ORCH.replace("attempts:", "task_concurrency: 3, attempts:"), False),
        ("run_config", GOOD_CONFIG + "models: {}\n", False),
        ("run_config", GOOD_CONFIG.replace("pull: missing", "pull: always"), False),
    ],
)
def test_schema_and_validator_agree(name: str, text: str, valid: bool) -> None:
    from acx.compiler import validate_document

    doc = parse_yaml_text(text.lstrip("\n"), "x.yaml")
    validator = jsonschema.Draft202012Validator(load_schema(name))
    assert validator.is_valid(doc.data) is valid
    assert (not [d for d in validate_document(doc) if d.severity == "error"]) is valid
