"""QA regression: a Harbor task with no image source is refused when it is loaded.

A task with no ``[environment] docker_image`` and no ``environment/Dockerfile`` used to plan,
open a run directory and fail every attempt with a message naming a directory that does not
exist. Now loading it is an E0410 naming the task directory and what to add (exit 2, nothing
run), unless the request gives the image (``setup.image``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from acx.cli import main
from acx.components.benchmarks.harbor import load_harbor_dataset
from acx.errors import AcxPlanError


def test_task_without_image_or_dockerfile_is_refused_at_load(harbor_task) -> None:
    # contract H3
    d = harbor_task("bare", "[agent]\ntimeout_sec = 10\n", dockerfile=None)
    with pytest.raises(AcxPlanError) as info:
        load_harbor_dataset(d)
    err = info.value
    assert err.code == "E0410"
    message = err.diagnostics[0].message
    assert str(d) in message and "docker_image" in message
    assert err.path == str(d / "task.toml")
    assert err.help is not None and "docker_image" in err.help and "environment/Dockerfile" in err.help


def test_an_image_from_the_task_or_the_request_is_enough(harbor_task) -> None:
    # contract H3
    with_image = harbor_task("img", '[environment]\ndocker_image = "acx-test/bookworm:latest"\n', dockerfile=None)
    assert [t.task_id for t in load_harbor_dataset(with_image)] == ["img"]
    bare = harbor_task("bare", "", dockerfile=None)
    assert [t.task_id for t in load_harbor_dataset(bare, image="acx-test/bookworm:latest")] == ["bare"]
    assert [t.task_id for t in load_harbor_dataset(harbor_task("built", ""))] == ["built"]  # has a Dockerfile


def test_separate_verifier_environment_needs_an_image_too(harbor_task) -> None:
    # contract H3
    toml = (
        '[environment]\ndocker_image = "acx-test/bookworm:latest"\n'
        '[verifier]\nenvironment_mode = "separate"\n[verifier.environment]\ncpus = 1\n'
    )
    d = harbor_task("sep", toml, dockerfile=None)
    with pytest.raises(AcxPlanError) as info:
        load_harbor_dataset(d)
    assert info.value.code == "E0410" and "[verifier.environment]" in info.value.diagnostics[0].message
    assert [t.task_id for t in load_harbor_dataset(d, evaluation_image="acx-test/bookworm:latest")] == ["sep"]
    # contract H2 (issue 11 item 17): the request's setup.image is layered over the verifier's setup too
    assert [t.task_id for t in load_harbor_dataset(d, image="acx-test/bookworm:latest")] == ["sep"]


def test_in_a_dataset_the_error_waits_for_selection(harbor_task, tmp_path: Path) -> None:
    # contract H3
    root = tmp_path / "tasks"
    harbor_task("bare", "", dockerfile=None, root=root)
    harbor_task("good", "", root=root)
    errors: dict[str, AcxPlanError] = {}
    tasks = load_harbor_dataset(root, errors=errors)
    assert [t.task_id for t in tasks] == ["bare", "good"] and list(errors) == ["bare"]


def _spec(tmp_path: Path, image: str | None = None) -> Path:
    setup = f'\n    setup {{ image = "{image}" }}\n  ' if image else ""
    spec = tmp_path / "run.acx"
    spec.write_text(
        'run r {\n  benchmark harbor { path = "tasks" }\n  harness command { command = "true" }\n'
        f"  environment docker {{{setup}}}\n}}\n"
    )
    return spec


def test_compile_exits_2_naming_the_task(
    tmp_path: Path, harbor_task, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # contract H3
    monkeypatch.chdir(tmp_path)
    d = harbor_task("bare", "", dockerfile=None, root=tmp_path / "tasks")
    assert main(["compile", str(_spec(tmp_path)), "--plans"]) == 2
    err = capsys.readouterr().err
    assert "E0410" in err and str(d) in err and "help:" in err and "Traceback" not in err
    # The request's image makes the same task valid.
    assert main(["compile", str(_spec(tmp_path, "acx-test/bookworm:latest")), "--plans"]) == 0
