"""Every field of Harbor's task.toml schema, from Harbor's own pydantic models.

Run with a Python that has the ``harbor`` package installed (it needs Python 3.12; acx's test
environment cannot install it, so the list is committed)::

    PYENV_VERSION=3.12.1 python3.12 scripts/harbor_task_fields.py > tests/planner/data/harbor_task_fields.txt

Output: a ``# harbor <version>`` header, then one line per field — its dotted path (``[]`` for an
element of a list of tables, e.g. ``steps[].agent.timeout_sec``) and its annotation, tab-separated.
Legacy keys Harbor accepts through validators rather than fields (``version``, ``memory``,
``storage``) are listed too, marked ``(legacy)``. tests/planner/test_harbor_fields.py checks that
acx's loader maps, warns about or refuses each one, and that docs/harbor.md's table lists it.
"""

from __future__ import annotations

import sys
import typing
from importlib.metadata import version
from types import NoneType, UnionType

from pydantic import BaseModel

#: Accepted by ``model_validator(mode="before")`` hooks, not declared as fields.
LEGACY = {
    "": [("version", "str (legacy alias of schema_version)")],
    "EnvironmentConfig": [
        ("memory", 'str (legacy, e.g. "2G")'),
        ("storage", 'str (legacy, e.g. "10G")'),
    ],
}


def _models(annotation: object) -> tuple[list[type[BaseModel]], bool]:
    """The pydantic models inside ``annotation`` and whether they sit in a list."""
    if isinstance(annotation, typing.ForwardRef | str):  # list["MCPServerConfig"]: resolved by name
        from harbor.models.task import config

        name = annotation.__forward_arg__ if isinstance(annotation, typing.ForwardRef) else annotation
        annotation = getattr(config, name)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, UnionType):
        found: list[type[BaseModel]] = []
        in_list = False
        for arg in typing.get_args(annotation):
            if arg is NoneType:
                continue
            models, listed = _models(arg)
            found += models
            in_list = in_list or listed
        return found, in_list
    if origin is list:
        models, _ = _models(typing.get_args(annotation)[0])
        return models, True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], False
    return [], False


def _text(annotation: object) -> str:
    return str(annotation).replace("typing.", "").replace("harbor.models.task.config.", "")


def walk(model: type[BaseModel], prefix: str, out: list[tuple[str, str]]) -> None:
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        out.append((path, _text(info.annotation)))
        models, in_list = _models(info.annotation)
        for sub in models:
            walk(sub, f"{path}{'[]' if in_list else ''}.", out)
    for name, text in LEGACY.get(model.__name__ if prefix else "", []):
        out.append((f"{prefix}{name}", text))


def main() -> int:
    from harbor.models.task.config import TaskConfig

    fields: list[tuple[str, str]] = []
    walk(TaskConfig, "", fields)
    seen: set[str] = set()
    sys.stdout.write(f"# harbor {version('harbor')}: task.toml fields (scripts/harbor_task_fields.py)\n")
    for path, text in fields:
        if path not in seen:
            seen.add(path)
            sys.stdout.write(f"{path}\t{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
