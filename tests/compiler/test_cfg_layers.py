"""Config discovery (contract R4)."""

from __future__ import annotations

import os

import pytest

from acx.compiler._layers import discover_config_layers
from acx.errors import AcxConfigError


def test_order_user_project_explicit(project, write, tmp_path_factory) -> None:  # contract R4
    xdg = tmp_path_factory.mktemp("xdg")
    write_user = xdg / "acx" / "config.yaml"
    write_user.parent.mkdir()
    write_user.write_text("execution: {max_retries: 1}\n")
    write("config.yaml", "execution: {max_retries: 2}\n")
    write("a.yaml", "{}\n")
    write("b.yaml", "{}\n")
    layers = discover_config_layers(["b.yaml", "a.yaml"], cwd=str(project), environ={"XDG_CONFIG_HOME": str(xdg)})
    assert [layer.layer for layer in layers] == ["user config", "project config", "--config", "--config"]
    assert [os.path.basename(layer.path) for layer in layers] == [
        "config.yaml",
        "config.yaml",
        "b.yaml",
        "a.yaml",
    ]


def test_user_config_falls_back_to_home(project, tmp_path_factory) -> None:  # contract R4
    home = tmp_path_factory.mktemp("home")
    (home / ".config" / "acx").mkdir(parents=True)
    (home / ".config" / "acx" / "config.yaml").write_text("{}\n")
    layers = discover_config_layers([], cwd=str(project), environ={"HOME": str(home)})
    assert [layer.layer for layer in layers] == ["user config"]


def test_project_config_is_found_upward_but_not_above_the_project_root(project, write) -> None:  # R4
    write("config.yaml", "{}\n")
    sub = project / "a" / "b"
    sub.mkdir(parents=True)
    layers = discover_config_layers([], cwd=str(sub), environ={})
    assert [layer.resolved for layer in layers] == [str((project / "config.yaml").resolve())]
    inner = project / "inner"
    (inner / "deep").mkdir(parents=True)
    (inner / "pyproject.toml").write_text("")
    assert discover_config_layers([], cwd=str(inner / "deep"), environ={}) == []


def test_missing_explicit_config_is_an_error(project) -> None:  # contract R4
    with pytest.raises(AcxConfigError) as info:
        discover_config_layers(["nope.yaml"], cwd=str(project), environ={})
    assert info.value.code == "E0209" and "nope.yaml" in info.value.diagnostics[0].message


def test_same_file_is_loaded_once(project, write) -> None:  # contract R4
    write("config.yaml", "{}\n")
    write("x.yaml", "{}\n")
    layers = discover_config_layers(["config.yaml", "x.yaml", "./x.yaml"], cwd=str(project), environ={})
    assert [layer.layer for layer in layers] == ["project config", "--config"]
