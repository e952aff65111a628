"""The compiler's private modules declare their ``__all__`` (the public one is pinned in
tests/test_public_api.py)."""

from __future__ import annotations


def test_private_modules_declare_all() -> None:
    import importlib

    for module in ("_yaml", "_layers", "_validate", "_interpolate", "_merge", "_resolve", "_redact", "_explain"):
        mod = importlib.import_module(f"acx.compiler.{module}")
        assert mod.__all__ and all(hasattr(mod, n) for n in mod.__all__)
