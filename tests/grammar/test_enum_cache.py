"""The `.acx` enum table is cached on disk (issue 11 item 18, bench/acx_dry_run_bench.py): the
cached table equals a freshly built one, a damaged cache is rebuilt, an unwritable cache costs
only the rebuild, and an edited root module gets a new key (a stale table is never reused)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from acx.compiler import _acx_lower as lower


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    lower._enum_table.cache_clear()
    yield tmp_path / "cache" / "acx"
    lower._enum_table.cache_clear()


def _cache_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("acx-enums-*.json"))


def test_cached_table_equals_the_built_one(cache_home: Path) -> None:
    first = lower._enum_table()
    (path,) = _cache_files(cache_home)
    lower._enum_table.cache_clear()
    assert lower._enum_table() == first  # read back from disk
    assert first["evaluation_environment_mode"] == frozenset({"none", "reuse", "fresh"})
    assert {k: sorted(v) for k, v in json.loads(path.read_text()).items()} == {k: sorted(v) for k, v in first.items()}


@pytest.mark.parametrize("damage", ["", "{not json", "[1, 2]", '{"x": [1]}', '{"x": "str"}'])
def test_a_damaged_cache_is_rebuilt(cache_home: Path, damage: str) -> None:
    good = lower._enum_table()
    (path,) = _cache_files(cache_home)
    path.write_text(damage)
    lower._enum_table.cache_clear()
    assert lower._enum_table() == good
    assert json.loads(path.read_text())  # rewritten


def test_an_unwritable_cache_directory_only_costs_the_rebuild(cache_home: Path) -> None:
    cache_home.parent.mkdir(parents=True, exist_ok=True)
    cache_home.write_text("a file where the directory should be")
    assert lower._enum_table()["evaluation_environment_mode"]


def test_an_edited_root_module_gets_a_new_key(cache_home: Path, tmp_path: Path) -> None:
    pkg = tmp_path / "plug"
    pkg.mkdir()
    module = pkg / "acx_enum_probe.py"
    module.write_text("import msgspec\nclass C(msgspec.Struct):\n    mode: str = 'a'\n")
    sys.path.insert(0, str(pkg))
    try:
        cls = importlib.import_module("acx_enum_probe").C
        before = lower._enum_cache_path([cls])
        st = module.stat()
        os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        assert lower._enum_cache_path([cls]) != before
    finally:
        sys.path.remove(str(pkg))
        sys.modules.pop("acx_enum_probe", None)


def test_a_bare_enum_name_imports_no_component_module_and_scans_no_plugin(tmp_path: Path) -> None:
    # Issue 30: checking `.acx` enum names imported every component module (the presets import
    # the dataset and Harbor benchmarks) and read every installed distribution's entry points.
    spec = tmp_path / "s.acx"
    spec.write_text("evaluation_environment_mode = fresh\n")
    code = (
        "import sys, importlib.metadata as md\n"
        "scans = []\n"
        "real = md.entry_points\n"
        "md.entry_points = lambda **kw: scans.append(kw) or real(**kw)\n"
        "from acx.compiler import _acx_lower as lower\n"
        "assert lower._builtin_enum_value('evaluation_environment_mode', 'fresh') == 'fresh'\n"
        "assert lower._builtin_enum_value('evaluation_environment_mode', 'frsh') is None\n"
        "heavy = [m for m in ('acx.components.benchmarks.presets', 'acx.components.benchmarks.dataset',"
        " 'acx.components.benchmarks.harbor') if m in sys.modules]\n"
        "print(heavy, scans)\n"
    )
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    for _ in range(2):  # a cold cache (the walk imports the roots) and a warm one
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] []"


def test_the_builtin_table_agrees_with_the_full_one(cache_home: Path) -> None:
    # A plugin's enum values only add to acx's own: every built-in value is in the full table.
    builtin, full = lower._enum_table(False), lower._enum_table()
    assert builtin and all(values <= full[key] for key, values in builtin.items())
