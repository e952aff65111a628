"""The compiled program: what ``acx compile -o plan.json`` writes and ``acx run plan.json`` runs.

It holds the resolved Orchestration and, per request, the selected TaskSpecs and the
ExecutionPlan of every task × attempt (``plans[task_id][attempt]``, attempt keys as strings for
JSON), plus plan provenance, and a content hash over everything else so a run executes exactly what
was inspected (a file edited by hand no longer matches its hash and is refused).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from acx.ir._common import IRStruct
from acx.ir._encoding import content_hash
from acx.ir._orchestration import Orchestration
from acx.ir._plan import ExecutionPlan, TaskSpec
from acx.ir._provenance import Contribution

__all__ = ["PROGRAM_FORMAT_VERSION", "CompiledProgram", "CompiledRequest", "ProgramError", "decode_program"]

PROGRAM_FORMAT_VERSION = 1


class CompiledRequest(IRStruct, frozen=True, kw_only=True):
    """One request of a compiled program: its selected tasks and their plans
    (``plans[task_id][str(attempt)]``); :class:`acx.interpreter.RequestProgram` is the runnable
    form built from it."""

    name: str
    base_dir: str
    tasks: list[TaskSpec]
    plans: dict[str, dict[str, ExecutionPlan]]
    #: Plan field provenance of each task's first attempt (``explain`` without recompiling).
    provenance: dict[str, dict[str, list[Contribution]]] = {}
    warnings: list[str] = []

    def plan(self, task_id: str, attempt: int) -> ExecutionPlan:
        return self.plans[task_id][str(attempt)]


class CompiledProgram(IRStruct, frozen=True, kw_only=True):
    format_version: Literal[1] = 1
    kind: Literal["acx.program"] = "acx.program"
    orchestration: Orchestration
    requests: list[CompiledRequest]
    #: ``sha256:…`` of the canonical JSON of (format_version, orchestration, requests).
    content_hash: str = ""

    def compute_hash(self) -> str:
        return content_hash([self.format_version, self.orchestration, self.requests])

    def sealed(self) -> CompiledProgram:
        return msgspec.structs.replace(self, content_hash=self.compute_hash())

    def request(self, name: str) -> CompiledRequest:
        for r in self.requests:
            if r.name == name:
                return r
        raise KeyError(name)


class ProgramError(ValueError):
    """A program file is malformed or its content hash does not match."""


def decode_program(data: bytes | str) -> CompiledProgram:
    """Decode and verify a program file (format version and content hash)."""
    try:
        program = msgspec.json.decode(data, type=CompiledProgram)
    except msgspec.ValidationError as exc:
        raise ProgramError(f"not an acx compiled program (format_version 1): {exc}") from None
    except msgspec.DecodeError as exc:
        raise ProgramError(f"not valid JSON: {exc}") from None
    expected = program.compute_hash()
    if program.content_hash != expected:
        raise ProgramError(
            f"content hash mismatch: the file says {program.content_hash or '(none)'}, its content hashes to "
            f"{expected}; the program was modified after `acx compile -o`"
        )
    return program
