"""Front-end dispatch: a file path → SourceDoc, by suffix (``.acx`` or YAML/JSON)."""

from __future__ import annotations

from acx.compiler._source import DocKind, SourceDoc

__all__ = ["load_document"]


def load_document(path: str, *, expected: DocKind | None = None) -> SourceDoc:
    """Load a spec or config file. ``expected`` names the kind the caller needs (checked)."""
    if path.endswith(".acx"):
        from acx.compiler._acx_lower import load_acx_document

        return load_acx_document(path, expected=expected)
    from acx.compiler._yaml import load_yaml_document

    return load_yaml_document(path, expected=expected)
