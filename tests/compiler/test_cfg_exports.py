"""The compiler's public front door (`acx.compiler.__all__`) is deliberate and complete."""

from __future__ import annotations

import acx.compiler


def test_public_names() -> None:
    assert sorted(acx.compiler.__all__) == sorted(
        [
            "DRY_RUN_FORMAT_VERSION",
            "Compiled",
            "SourceDoc",
            "compile_orchestration",
            "compile_run",
            "deep_merge",
            "dry_run_payload",
            "load_config_documents",
            "orchestration_id",
            "output_namespace",
            "redact",
            "validate_document",
        ]
    )
    for name in acx.compiler.__all__:
        assert getattr(acx.compiler, name) is not None


def test_private_modules_declare_all() -> None:
    import importlib

    for module in ("_yaml", "_layers", "_validate", "_interpolate", "_merge", "_resolve", "_redact", "_explain"):
        mod = importlib.import_module(f"acx.compiler.{module}")
        assert mod.__all__ and all(hasattr(mod, n) for n in mod.__all__)
