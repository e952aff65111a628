"""No test package shadows a module of the standard library or of a dependency: pytest puts
``tests/`` on sys.path (rootdir insertion), so a ``tests/secrets`` package once replaced the stdlib
``secrets`` module in every test process (hypothesis failed to import ``secrets.randbits``)."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).parent
#: Third-party top-level modules acx or its test tools import.
DEPENDENCIES = {"docker", "httpx", "h11", "hypothesis", "lark", "msgspec", "pyarrow", "ray", "rich", "trio", "yaml"}


def test_no_test_package_shadows_a_real_module() -> None:
    names = {p.name for p in TESTS.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    names |= {p.stem for p in TESTS.glob("*.py")}
    clashes = names & (set(sys.stdlib_module_names) | DEPENDENCIES | {"datasets", "playwright"})
    assert not clashes, f"rename these test packages/modules: {sorted(clashes)}"
