"""JSON Schemas (draft 2020-12) of acx's YAML inputs, generated from the IR and component config types.

The generated files are committed next to this module (``run_config.schema.json``,
``orchestration.schema.json``) for editors and CI; a test fails when they drift from the types.
Regenerate with ``acx schema --out src/acx/schemas``. acx itself validates with the types
(``acx.compiler._validate``), never by loading these files at run time.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

__all__ = ["SCHEMA_FILES", "generate_schemas", "load_schema"]

#: schema name → committed file name
SCHEMA_FILES = {"run_config": "run_config.schema.json", "orchestration": "orchestration.schema.json"}


def generate_schemas() -> dict[str, dict[str, Any]]:
    """Both schemas, freshly generated from the types."""
    from acx.schemas._generate import generate

    return generate()


def load_schema(name: str) -> dict[str, Any]:
    """The committed schema ``name`` (``run_config`` or ``orchestration``)."""
    text = resources.files(__name__).joinpath(SCHEMA_FILES[name]).read_text(encoding="utf-8")
    return json.loads(text)  # type: ignore[no-any-return]
