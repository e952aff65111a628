"""The acx IR: frozen msgspec Structs for every contract type, canonical encoding, content hash.

The IR is the contract between the compiler and the interpreter: ``acx compile -o plan.json``
then ``acx run plan.json`` runs exactly what was inspected.
"""

from acx.ir._common import (
    MODEL_GATEWAY_HOST as MODEL_GATEWAY_HOST,
)
from acx.ir._common import (
    ArtifactCollectCommand as ArtifactCollectCommand,
)
from acx.ir._common import (
    ArtifactLimits as ArtifactLimits,
)
from acx.ir._common import (
    ArtifactSpec as ArtifactSpec,
)
from acx.ir._common import (
    EnvironmentSetup as EnvironmentSetup,
)
from acx.ir._common import (
    IRStruct as IRStruct,
)
from acx.ir._common import (
    NetworkPolicy as NetworkPolicy,
)
from acx.ir._common import (
    ResourceRequirements as ResourceRequirements,
)
from acx.ir._encoding import canonical_json as canonical_json
from acx.ir._encoding import content_hash as content_hash
from acx.ir._encoding import decode as decode
from acx.ir._encoding import to_builtins as to_builtins
from acx.ir._orchestration import (
    ClusterOptions as ClusterOptions,
)
from acx.ir._orchestration import (
    OrchestratedRun as OrchestratedRun,
)
from acx.ir._orchestration import (
    Orchestration as Orchestration,
)
from acx.ir._orchestration import (
    ResolvedRuntimeOptions as ResolvedRuntimeOptions,
)
from acx.ir._plan import (
    UNSET as UNSET,
)
from acx.ir._plan import (
    BenchmarkPlan as BenchmarkPlan,
)
from acx.ir._plan import (
    ExecutionPlan as ExecutionPlan,
)
from acx.ir._plan import (
    FileRef as FileRef,
)
from acx.ir._plan import (
    HarnessPlan as HarnessPlan,
)
from acx.ir._plan import (
    Message as Message,
)
from acx.ir._plan import (
    OutputFileSpec as OutputFileSpec,
)
from acx.ir._plan import (
    PreparedTask as PreparedTask,
)
from acx.ir._plan import (
    StepPlan as StepPlan,
)
from acx.ir._plan import (
    TaskInput as TaskInput,
)
from acx.ir._plan import (
    TaskOutput as TaskOutput,
)
from acx.ir._plan import (
    TaskSpec as TaskSpec,
)
from acx.ir._plan import (
    TaskStep as TaskStep,
)
from acx.ir._plan import (
    UnsetType as UnsetType,
)
from acx.ir._program import PROGRAM_FORMAT_VERSION as PROGRAM_FORMAT_VERSION
from acx.ir._program import CompiledProgram as CompiledProgram
from acx.ir._program import CompiledRequest as CompiledRequest
from acx.ir._program import ProgramError as ProgramError
from acx.ir._program import decode_program as decode_program
from acx.ir._provenance import Contribution as Contribution
from acx.ir._provenance import Provenance as Provenance
from acx.ir._provenance import SourceKind as SourceKind
from acx.ir._request import (
    ENVIRONMENT_SPEC_FIELDS as ENVIRONMENT_SPEC_FIELDS,
)
from acx.ir._request import (
    AttemptsSpec as AttemptsSpec,
)
from acx.ir._request import (
    BenchmarkSpec as BenchmarkSpec,
)
from acx.ir._request import (
    EnvironmentSpec as EnvironmentSpec,
)
from acx.ir._request import (
    ExecutionSpec as ExecutionSpec,
)
from acx.ir._request import (
    ExportSpec as ExportSpec,
)
from acx.ir._request import (
    HarnessSpec as HarnessSpec,
)
from acx.ir._request import (
    ModelLimits as ModelLimits,
)
from acx.ir._request import (
    ModelPrice as ModelPrice,
)
from acx.ir._request import (
    ModelRoleSpec as ModelRoleSpec,
)
from acx.ir._request import (
    ModelSpec as ModelSpec,
)
from acx.ir._request import (
    OutputSpec as OutputSpec,
)
from acx.ir._request import (
    RunMetadata as RunMetadata,
)
from acx.ir._request import (
    RunRequest as RunRequest,
)
from acx.ir._request import (
    RunRuntimeSpec as RunRuntimeSpec,
)
from acx.ir._result import ExecutionIssue as ExecutionIssue
from acx.ir._result import MetricContract as MetricContract
from acx.ir._result import MetricDisplay as MetricDisplay
from acx.ir._result import MetricSpec as MetricSpec
from acx.ir._result import RunResult as RunResult
from acx.ir._result import TaskStatus as TaskStatus
from acx.ir._result import status_from_issues as status_from_issues

__all__ = [
    "ENVIRONMENT_SPEC_FIELDS",
    "MODEL_GATEWAY_HOST",
    "PROGRAM_FORMAT_VERSION",
    "UNSET",
    "ArtifactCollectCommand",
    "ArtifactLimits",
    "ArtifactSpec",
    "AttemptsSpec",
    "BenchmarkPlan",
    "BenchmarkSpec",
    "ClusterOptions",
    "CompiledProgram",
    "CompiledRequest",
    "Contribution",
    "EnvironmentSetup",
    "EnvironmentSpec",
    "ExecutionIssue",
    "ExecutionPlan",
    "ExecutionSpec",
    "ExportSpec",
    "FileRef",
    "HarnessPlan",
    "HarnessSpec",
    "IRStruct",
    "Message",
    "MetricContract",
    "MetricDisplay",
    "MetricSpec",
    "ModelLimits",
    "ModelPrice",
    "ModelRoleSpec",
    "ModelSpec",
    "NetworkPolicy",
    "OrchestratedRun",
    "Orchestration",
    "OutputFileSpec",
    "OutputSpec",
    "PreparedTask",
    "ProgramError",
    "Provenance",
    "ResolvedRuntimeOptions",
    "ResourceRequirements",
    "RunMetadata",
    "RunRequest",
    "RunResult",
    "RunRuntimeSpec",
    "SourceKind",
    "StepPlan",
    "TaskInput",
    "TaskOutput",
    "TaskSpec",
    "TaskStatus",
    "TaskStep",
    "UnsetType",
    "canonical_json",
    "content_hash",
    "decode",
    "decode_program",
    "status_from_issues",
    "to_builtins",
]
