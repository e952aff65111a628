"""Lowering .acx → the YAML data shape (SourceDoc), declarative recipes."""

from __future__ import annotations

from pathlib import Path

import pytest

from acx.compiler._acx_lower import DeclarativeRecipe, load_acx_document, load_acx_recipes
from acx.errors import AcxSyntaxError


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def _lower(tmp_path: Path, text: str, **kw: object) -> object:
    return load_acx_document(_write(tmp_path, "spec.acx", text), **kw)  # type: ignore[arg-type]


def _codes(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(AcxSyntaxError) as info:
        _lower(tmp_path, text)
    return [d.code for d in info.value.diagnostics]


def test_orchestration_shape(tmp_path: Path) -> None:
    # contract R10, R13: defaults, named requests in declaration order, component params beside id
    doc = _lower(
        tmp_path,
        """
        orchestration nightly {
          task_concurrency = 4
          runtime { progress = plain }
          defaults { harness openai_chat { max_tokens = 5 }; environment host_process }
          run qa { benchmark exact_match { dataset = "qa.jsonl" } }
          for m in ["a", "b"] { run "r-${m}" { model { id = m } } }
        }
        """,
    )
    assert doc.kind == "orchestration"  # type: ignore[attr-defined]
    assert doc.data == {  # type: ignore[attr-defined]
        "version": 1,
        "name": "nightly",
        "task_concurrency": 4,
        "runtime": {"progress": "plain"},
        "defaults": {
            "harness": {"id": "openai_chat", "max_tokens": 5},
            "environment": {"id": "host_process"},
        },
        "requests": [
            {"name": "qa", "benchmark": {"id": "exact_match", "dataset": "qa.jsonl"}},
            {"name": "r-a", "model": {"id": "a"}},
            {"name": "r-b", "model": {"id": "b"}},
        ],
    }


def test_single_run_form(tmp_path: Path) -> None:
    doc = _lower(tmp_path, "run smoke { harness none }")
    expected = {"version": 1, "name": "smoke", "requests": [{"name": "smoke", "harness": {"id": "none"}}]}
    assert doc.data == expected  # type: ignore[attr-defined]


def test_run_config_form(tmp_path: Path) -> None:
    # contract R7: component params flat under their id
    doc = _lower(
        tmp_path,
        "runtime { timeout = 1h }\nbenchmark exact_match { case_sensitive = true }\nenvironment docker\n",
        expected="run_config",
    )
    assert doc.kind == "run_config"  # type: ignore[attr-defined]
    assert doc.data == {  # type: ignore[attr-defined]
        "runtime": {"timeout_seconds": 3600},
        "benchmarks": {"exact_match": {"case_sensitive": True}},
        "environments": {"docker": {}},
    }


def test_expected_kind_is_checked(tmp_path: Path) -> None:
    with pytest.raises(AcxSyntaxError) as info:
        _lower(tmp_path, "run r { harness none }", expected="run_config")
    assert info.value.code == "E0132"


@pytest.mark.parametrize(
    ("assign", "key", "value"),
    [
        ("run_timeout = 30m", "run_timeout_seconds", 1800),
        ("run_timeout_seconds = 90s", "run_timeout_seconds", 90),
        ("retry_min_delay = 500ms", "retry_min_delay_seconds", 0.5),
        ("timeout = 1h30m", "timeout_seconds", 5400),
        ("memory = 16GiB", "memory_mb", 16384),
        ("max_mb = 512MiB", "max_mb", 512),
        ("storage = 2000MB", "storage_mb", None),
    ],
)
def test_typed_literals_lower_to_ir_units(tmp_path: Path, assign: str, key: str, value: object) -> None:
    if value is None:  # 2000 MB is not a whole number of MiB
        assert _codes(tmp_path, f"x {{ {assign} }}") == ["E0130"]
        return
    doc = _lower(tmp_path, f"execution {{ {assign} }}")
    assert doc.data == {"execution": {key: value}}  # type: ignore[attr-defined]


def test_enum_names_are_checked_and_mapped(tmp_path: Path) -> None:
    doc = _lower(
        tmp_path,
        "environment docker { run_network_policy = no_network\nevaluation_environment_mode = fresh; pull = missing }",
    )
    assert doc.data["environments"]["docker"] == {  # type: ignore[attr-defined]
        "run_network_policy": "no-network",
        "evaluation_environment_mode": "fresh",
        "pull": "missing",
    }
    assert _codes(tmp_path, "environment docker { evaluation_environment_mode = fressh }") == ["E0126"]


def test_env_and_secret_are_references_never_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # contract R6, V1: the front end never reads the process environment; secrets stay references
    monkeypatch.setenv("MODEL_API_KEY", "sk-super-secret")
    monkeypatch.setenv("BASE", "http://host")
    doc = _lower(tmp_path, 'let k = secret("MODEL_API_KEY")\nrun r { model { api_key = k; base_url = env("BASE") } }')
    model = doc.data["requests"][0]["model"]  # type: ignore[attr-defined]
    assert model == {"api_key": "${MODEL_API_KEY}", "base_url": "${BASE}"}
    assert doc.secret_paths == frozenset({("requests", 0, "model", "api_key")})  # type: ignore[attr-defined]
    assert "sk-super-secret" not in repr(doc)


def test_lets_interpolation_and_escape(tmp_path: Path) -> None:
    doc = _lower(
        tmp_path,
        'let base = "img"\nlet n = 3\nlet tag = "${base}:v${n}"\nrun r { x { image = tag; lit = "$${HOME}" } }',
    )
    assert doc.data["requests"][0]["x"] == {"image": "img:v3", "lit": "${HOME}"}  # type: ignore[attr-defined]


def test_imports_are_relative_and_shared_files_load_once(tmp_path: Path) -> None:
    _write(tmp_path, "lib/base.acx", 'let image = "python:3.12"')
    _write(tmp_path, "lib/a.acx", 'import "base.acx"\nlet a = image')
    _write(tmp_path, "lib/b.acx", 'import "base.acx"\nlet b = image')
    spec = _write(
        tmp_path,
        "specs/spec.acx",
        'import "../lib/a.acx"\nimport "../lib/b.acx"\nrun r { s { x = a; y = b } }',
    )
    doc = load_acx_document(spec)
    assert doc.data["requests"][0]["s"] == {"x": "python:3.12", "y": "python:3.12"}


def test_import_cycle_names_the_chain(tmp_path: Path) -> None:
    _write(tmp_path, "a.acx", 'import "b.acx"')
    _write(tmp_path, "b.acx", 'import "a.acx"')
    spec = _write(tmp_path, "spec.acx", 'import "a.acx"\nrun r {}')
    with pytest.raises(AcxSyntaxError) as info:
        load_acx_document(spec)
    diag = info.value.diagnostics[0]
    assert diag.code == "E0122" and "a.acx → " in diag.message and "b.acx → " in diag.message


def test_spans_point_into_the_acx_source(tmp_path: Path) -> None:
    doc = _lower(tmp_path, "run r {\n  execution {\n    run_timeout = 30m\n  }\n}\n")
    path = ("requests", 0, "execution", "run_timeout_seconds")
    value, key = doc.span_of(path), doc.key_span_of(path)  # type: ignore[attr-defined]
    assert (value.line, value.col) == (3, 19)
    assert (key.line, key.col) == (3, 5)
    assert value.file.endswith("spec.acx")


def test_every_mistake_is_reported_once(tmp_path: Path) -> None:
    codes = _codes(tmp_path, "let a = 1\nlet a = 2\nrun r { x = nope; y { z = 1; z = 2 }; w = [1s] }")
    assert codes == ["E0124", "E0125", "E0127", "E0130"]


def test_recipes(tmp_path: Path) -> None:
    # contract RC1: declarative recipes become registry entries over ExecutionPlan field names
    path = _write(
        tmp_path,
        "recipes.acx",
        """
        recipe harbor_docker_workdir {
          description = "Harbor tasks on docker default to /app as workdir"
          match { benchmark = "harbor"; environment = ["docker"] }
          defaults { environment { setup { workdir = "/app" } } }
          set { run_timer_compensation = 60s; run_network_policy = no_network }
        }
        """,
    )
    (recipe,) = load_acx_recipes(path)
    assert isinstance(recipe, DeclarativeRecipe)
    assert recipe.id == "harbor_docker_workdir"
    assert recipe.match == {"benchmark": ["harbor"], "environment": ["docker"]}
    assert recipe.defaults == {"environment": {"setup": {"workdir": "/app"}}}
    assert recipe.set == {
        "run_timer_compensation_seconds": 60,
        "run_network_policy": {"network_mode": "no-network"},
    }
    assert recipe.span.line == 2


def test_recipes_are_accepted_by_the_recipe_engine(tmp_path: Path) -> None:
    recipes = pytest.importorskip("acx.compiler._recipes")
    text = 'recipe r { match { benchmark = "x" }; set { run_timer_compensation = 1m } }'
    path = _write(tmp_path, "r.acx", text)
    adapter = recipes.DeclarativeRecipeAdapter(load_acx_recipes(path)[0])
    assert adapter.id == "r"


def test_stdlib_recipe_files_load() -> None:
    root = Path(__file__).resolve().parents[2] / "src" / "acx" / "stdlib_recipes"
    for path in sorted(root.glob("*.acx")):
        assert all(r.id for r in load_acx_recipes(str(path)))


def test_recipe_fields_are_closed_records(tmp_path: Path) -> None:
    path = _write(tmp_path, "r.acx", "recipe r { set { run_timout = 1m } }")
    with pytest.raises(AcxSyntaxError) as info:
        load_acx_recipes(path)
    assert info.value.code == "E0133" and "run_timeout_seconds" in (info.value.help or "")


def test_recipes_of_a_file_imported_twice_load_once(tmp_path: Path) -> None:
    _write(tmp_path, "base.acx", 'recipe shared { match { benchmark = "x" } }')
    _write(tmp_path, "a.acx", 'import "base.acx"')
    _write(tmp_path, "b.acx", 'import "base.acx"')
    path = _write(tmp_path, "all.acx", 'import "a.acx"\nimport "b.acx"')
    assert [r.id for r in load_acx_recipes(path)] == ["shared"]
