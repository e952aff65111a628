"""The public API is deliberate: each public module's ``__all__`` is pinned here.

Changing a public name is a user-visible change: update this list, the docs and CHANGELOG.md.
"""

from __future__ import annotations

import importlib

import pytest

PUBLIC_API: dict[str, list[str]] = {
    "acx": [
        "AcxError",
        "AcxUserError",
        "__version__",
    ],
    "acx.ir": [
        "ArtifactCollectCommand",
        "ArtifactLimits",
        "ArtifactSpec",
        "AttemptsSpec",
        "BenchmarkPlan",
        "BenchmarkSpec",
        "CompiledProgram",
        "Contribution",
        "ENVIRONMENT_SPEC_FIELDS",
        "EnvironmentSetup",
        "EnvironmentSpec",
        "ExecutionIssue",
        "ExecutionPlan",
        "ExecutionSpec",
        "FileRef",
        "HarnessPlan",
        "HarnessSpec",
        "IRStruct",
        "Message",
        "MetricContract",
        "MetricDisplay",
        "MetricSpec",
        "ModelSpec",
        "NetworkPolicy",
        "OrchestratedRun",
        "Orchestration",
        "OutputFileSpec",
        "OutputSpec",
        "PROGRAM_FORMAT_VERSION",
        "PreparedTask",
        "ProgramError",
        "Provenance",
        "RequestProgram",
        "ResolvedRuntimeOptions",
        "ResourceRequirements",
        "RunMetadata",
        "RunRequest",
        "RunResult",
        "RunRuntimeSpec",
        "TaskInput",
        "TaskOutput",
        "TaskSpec",
        "TaskStatus",
        "UNSET",
        "UnsetType",
        "canonical_json",
        "content_hash",
        "decode",
        "decode_program",
        "status_from_issues",
        "to_builtins",
    ],
    "acx.errors": [
        "AcxConfigError",
        "AcxError",
        "AcxInternalError",
        "AcxPlanError",
        "AcxResolutionError",
        "AcxResultsError",
        "AcxRuntimeError",
        "AcxSyntaxError",
        "AcxUserError",
        "CapabilityError",
        "DriverError",
        "EnvironmentSetupError",
        "PhaseTimeoutError",
    ],
    "acx.envref": [
        "ENV_MAP_KEYS",
        "NAME",
        "REFERENCE",
        "has_reference_syntax",
        "iter_references",
        "malformed_whole",
        "referenced_names",
        "resolved_values",
        "substitute",
        "whole_default_name",
        "whole_name",
    ],
    "acx.secrets": [
        "CONTAINER_KEYS",
        "FRAME_KEY_ENDINGS",
        "NON_SENSITIVE_KEYS",
        "REDACTED",
        "SECRET_NAME_PARTS",
        "SECRET_NAME_WORDS",
        "SENSITIVE_KEYS",
        "SENSITIVE_SUFFIXES",
        "is_container_key",
        "is_secret_name",
        "is_sensitive_key",
        "is_sensitive_path",
        "mask_url_credentials",
    ],
    "acx.diagnostics": [
        "Diagnostic",
        "Related",
        "Span",
        "did_you_mean",
        "render_json",
        "render_text",
        "unique",
    ],
    "acx.compiler": [
        "Compiled",
        "DRY_RUN_FORMAT_VERSION",
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
    ],
    "acx.grammar": [
        "format_source",
        "parse",
        "parse_file",
        "print_module",
    ],
    "acx.drivers": [
        "DRIVERS",
        "Driver",
        "DriverCapabilities",
        "DriverInfo",
        "EnvironmentConfig",
        "ExecResult",
        "FakeDriver",
        "HostProcessDriver",
        "OpenRequest",
        "Session",
        "create_driver",
        "default_env_open_qps",
        "default_provider_limits",
        "probe_capabilities",
    ],
    "acx.drivers.transfer": [
        "ArchiveLimitError",
        "ExtractStats",
        "UnsafeArchiveError",
        "is_excluded",
        "symlink_escapes",
    ],
    "acx.drivers.docker": [
        "DockerDriver",
        "DockerSession",
        "LABEL_HOST",
        "LABEL_KEEP",
        "LABEL_MANAGED",
        "LABEL_PID",
        "LABEL_SESSION",
        "close_objects",
        "docker_client",
        "engine_available",
        "is_orphan",
        "list_objects",
        "sweep_orphans",
    ],
    "acx.testing": [
        "driver_conformance",
        "fake_models",
    ],
    "acx.testing.fake_models": [
        "FakeModelServer",
        "RecordedRequest",
        "Step",
        "drop",
        "error",
        "malformed",
        "text",
        "tool_call",
    ],
    "acx.models": [
        "AttemptRecord",
        "CallRecord",
        "ChatRequest",
        "Endpoint",
        "Exchange",
        "Gateway",
        "GatewaySession",
        "Limits",
        "ModelCallError",
        "ModelClient",
        "ModelResponse",
        "PROTOCOLS",
        "Price",
        "Protocol",
        "RetryPolicy",
        "Role",
        "ToolCall",
        "Usage",
        "UsageTotals",
        "actf_trajectory",
        "build_call",
        "call_path",
        "classify_status",
        "cost_of",
        "normalize_request",
        "parse_response",
        "parse_retry_after",
    ],
    "acx.testing.results": [
        "actf_trajectory",
        "synthetic_tasks",
        "write_run",
    ],
    "acx.results": [
        "AttemptRecord",
        "FINAL_STATES",
        "PhaseTiming",
        "RUN_INFO_SCHEMA",
        "RunReader",
        "TaskRecord",
        "find_runs",
    ],
    "acx.report": [
        "ROW_FIELDS",
        "Redactor",
        "ReportWritten",
        "RunData",
        "ViewServer",
        "compare_runs",
        "filter_rows",
        "load_run",
        "paired_difference",
        "render_runs",
        "write_report",
    ],
    "acx.interpreter": [
        "OrchestrationResult",
        "RequestOutcome",
        "RequestProgram",
        "plan_audit",
        "preflight",
        "run_orchestration",
    ],
    "acx.components": [
        "BENCHMARKS",
        "BaseBenchmark",
        "BaseHarness",
        "BenchmarkConfig",
        "ComponentInfo",
        "DEFAULT_ARTIFACTS_DIR",
        "HARNESSES",
        "HarnessConfig",
        "SCORERS",
        "registry",
    ],
    "acx.registry": [
        "ComponentInfo",
        "ComponentLookupError",
        "Registry",
        "import_ref",
    ],
    "acx.components.scorers": [
        "BaseScorer",
        "SCORERS",
        "ScorerConfig",
    ],
    "acx.schemas": [
        "SCHEMA_FILES",
        "generate_schemas",
        "load_schema",
    ],
}


@pytest.mark.parametrize("module", sorted(PUBLIC_API))
def test_all_is_pinned(module: str) -> None:
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == PUBLIC_API[module]


@pytest.mark.parametrize("module", sorted(PUBLIC_API))
def test_every_public_name_resolves(module: str) -> None:
    mod = importlib.import_module(module)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.{name} is listed in __all__ but missing"


def test_heavy_dependencies_stay_at_their_edge() -> None:
    """Importing the compiler must not import trio, the docker SDK or rich (fast dry runs)."""
    import subprocess
    import sys

    code = (
        "import sys, acx.compiler, acx.cli._compile; "
        "bad = [m for m in ('trio', 'docker', 'rich', 'lark', 'httpx', 'h11') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
