"""Precedence resolution with provenance (contracts R8–R13).

Every request section is built by merging an ordered list of *fragments* (lowest precedence
first): the field defaults, each config file's entry, the orchestration ``defaults``, the named
request, then explicit CLI values. While merging, each leaf records a contribution (layer,
``file:line:col`` / flag / default, value as written — redacted when secret). After the typed
conversion the provenance table holds, for every leaf of the resolved request, the chain of
contributions that reached it, winner last.

Precedence (R10, R11; low → high):

* component params: field defaults → config ``<section>.<id>`` (per file, in order) →
  ``defaults.<section>`` (when it selects the same id or none) → request section.
* model: defaults → ``defaults.model`` → request ``model``.
* execution (all but task_concurrency): defaults → config ``execution`` → ``defaults.execution``
  → request ``execution`` → ``--execution-params``.
* per-request runtime: defaults → config ``runtime.reuse/checkpoint_resume`` →
  ``defaults.runtime`` → request ``runtime``; ``reuse_run_id`` implies ``reuse: true``.
* output: defaults → ``defaults.output`` → request ``output``.
* orchestration runtime: defaults → config ``runtime`` → orchestration ``runtime`` →
  ``--runtime-params``.
* task_concurrency: ``--task-concurrency`` → orchestration → config ``execution`` → 32.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import msgspec

from acx.compiler._interpolate import Interpolation, env_ref_name, format_path, interpolate
from acx.compiler._merge import deep_copy
from acx.compiler._redact import is_sensitive_path, redact, redact_value
from acx.compiler._shapes import (
    NETWORK_POLICY_FIELDS,
    RUNTIME_REUSE_KEYS,
    field_defaults,
    output_namespace,
)
from acx.compiler._source import Path_, SourceDoc
from acx.compiler._validate import (
    UNSUPPORTED_BENCHMARK,
    UNSUPPORTED_EXECUTION,
    UNSUPPORTED_RUNTIME,
    lone_surrogate,
    regex_problem,
    select_help,
    split_msgspec_error,
    value_at,
)
from acx.diagnostics import Diagnostic, Span, did_you_mean, unique
from acx.errors import AcxResolutionError, AcxUserError
from acx.ir import (
    ENVIRONMENT_SPEC_FIELDS,
    BenchmarkSpec,
    Contribution,
    EnvironmentSpec,
    ExecutionSpec,
    HarnessSpec,
    ModelSpec,
    OrchestratedRun,
    Orchestration,
    OutputSpec,
    ResolvedRuntimeOptions,
    RunMetadata,
    RunRequest,
    RunRuntimeSpec,
    SourceKind,
    canonical_json,
)

if TYPE_CHECKING:
    from acx.components import MappedHarness

__all__ = [
    "Compiled",
    "ConfigDoc",
    "config_view",
    "orchestration_id",
    "output_namespace",
    "resolve_orchestration",
]

DEFAULT_ENVIRONMENT = "host_process"
_EVALUATION_ONLY_FIELDS = (
    "evaluation_baseline_network_policy",
    "evaluation_environment_env_variables",
    "evaluation_setup",
    "evaluation_resources",
)


@dataclass(frozen=True)
class Compiled:
    """The resolved orchestration plus everything needed to explain it."""

    orchestration: Orchestration
    #: request name → dotted field path → contributions, lowest precedence first, winner last.
    provenance: dict[str, dict[str, list[Contribution]]]
    #: file → text, for code frames in diagnostics.
    sources: dict[str, str]
    #: request name → directory that relative benchmark paths resolve against.
    base_dirs: dict[str, str]
    #: orchestration-level fields (``task_concurrency``, ``name``, ``runtime.*``) → contributions.
    orchestration_provenance: dict[str, list[Contribution]] = field(default_factory=dict)
    #: the spec file and the config files, in load order.
    spec_path: str = ""
    config_paths: tuple[str, ...] = ()
    #: non-fatal diagnostics (e.g. W0301 defaults params not applied), for the CLI to print.
    warnings: tuple[Diagnostic, ...] = ()


@dataclass(frozen=True)
class ConfigDoc:
    """A loaded run config file and the layer it belongs to (``user config``, ``--config``, ...)."""

    layer: str
    doc: SourceDoc


# ---- fragments and contributions ----------------------------------------------------------------


@dataclass
class _Rec:
    seq: int
    layer: str
    kind: SourceKind
    source: str
    value: Any
    span: Span | None
    key_span: Span | None

    def public(self) -> Contribution:
        return Contribution(layer=self.layer, kind=self.kind, source=self.source, value=self.value)


@dataclass
class _Frag:
    """One layer's say on one section: plain data found at ``base`` in ``doc`` (or a flag)."""

    layer: str
    kind: SourceKind
    data: dict[str, Any]
    doc: SourceDoc | None = None
    base: Path_ = ()
    flag: str = ""
    subst: dict[Path_, str] = field(default_factory=dict)
    #: what interpolating this fragment read (None for defaults and CLI JSON).
    interp: Interpolation | None = None

    def source(self, rel: Path_) -> str:
        if self.doc is None:
            return self.flag
        text = str(self.doc.span_of((*self.base, *rel)))
        if rel in self.subst:
            text += f" via ${{{self.subst[rel]}}}"
        return text

    def span(self, rel: Path_) -> Span | None:
        return None if self.doc is None else self.doc.span_of((*self.base, *rel))

    def key_span(self, rel: Path_) -> Span | None:
        return None if self.doc is None else self.doc.key_span_of((*self.base, *rel))


class _Merger:
    """Merges fragments like ``deep_merge`` while recording a contribution per leaf."""

    def __init__(self, prefix: Callable[[Path_], Path_], atomic: Callable[[Path_], bool]) -> None:
        self.prefix = prefix
        self.atomic = atomic
        self.data: dict[str, Any] = {}
        self.recs: dict[Path_, list[_Rec]] = {}
        self._seq = 0

    def add(self, frag: _Frag) -> None:
        self._into(self.data, frag.data, (), frag)

    def _into(self, out: dict[str, Any], data: Mapping[str, Any], rel: Path_, frag: _Frag) -> None:
        for key, value in data.items():
            path = (*rel, key)
            if isinstance(value, Mapping) and not self.atomic(self.prefix(path)):
                current = out.get(key)
                if not isinstance(current, dict):
                    current = out[key] = {}
                if not value:
                    self._record(path, {}, frag)
                self._into(current, value, path, frag)
            else:
                out[key] = deep_copy(value)
                self._record(path, value, frag)

    def _record(self, rel: Path_, value: Any, frag: _Frag) -> None:
        full = self.prefix(rel)
        shown = redact_value(value) if is_sensitive_path(full) else redact(deep_copy(value))
        self._seq += 1
        rec = _Rec(self._seq, frag.layer, frag.kind, frag.source(rel), shown, frag.span(rel), frag.key_span(rel))
        self.recs.setdefault(full, []).append(rec)

    def winner(self, full: Path_) -> _Rec | None:
        """The latest contribution at ``full``, an ancestor (set wholesale) or a descendant."""
        related = [r for p, rs in self.recs.items() if p[: len(full)] == full or full[: len(p)] == p for r in rs]
        return max(related, key=lambda r: r.seq) if related else None


def _flatten(value: Any, path: Path_, atomic: Callable[[Path_], bool], out: dict[Path_, Any]) -> None:
    if isinstance(value, dict) and value and not atomic(path):
        for k, v in value.items():
            _flatten(v, (*path, k), atomic, out)
    else:
        out[path] = value


def _chains(merger: _Merger, final: Mapping[str, Any], prefix: Path_) -> dict[str, list[Contribution]]:
    """Contribution chain of every leaf of ``final`` (a resolved section at ``prefix``)."""
    leaves: dict[Path_, Any] = {}
    _flatten(dict(final), prefix, merger.atomic, leaves)
    out: dict[str, list[Contribution]] = {}
    for leaf in leaves:
        recs: list[_Rec] = []
        for cut in range(len(prefix), len(leaf) + 1):
            recs.extend(merger.recs.get(leaf[:cut], ()))
        if recs:
            recs.sort(key=lambda r: r.seq)
            out[format_path(leaf)] = [r.public() for r in recs]
    return out


# ---- the resolver -------------------------------------------------------------------------------


class _Resolver:
    def __init__(
        self,
        spec: SourceDoc,
        configs: Sequence[ConfigDoc],
        *,
        task_concurrency: int | None,
        execution_params: Mapping[str, Any] | None,
        runtime_params: Mapping[str, Any] | None,
        environ: Mapping[str, str],
        cli_sections: Mapping[str, str] | None = None,
        environment: str | None = None,
    ) -> None:
        self.spec = spec
        #: ``--env ID``: switches every request's environment provider (highest precedence).
        self.environment_override = environment
        self.configs = list(configs)
        self.cli_task_concurrency = task_concurrency
        self.environ = environ
        self.diagnostics: list[Diagnostic] = []
        self.execution_params = self.cli_json(execution_params, "execution", "--execution-params")
        self.runtime_params = self.cli_json(runtime_params, "runtime", "--runtime-params")
        self._frag_cache: dict[tuple[int, Path_], _Frag | None] = {}
        #: the AgentCompass harness id the current request named (mapped), for its metadata.
        self.harness_alias: str | None = None
        #: single-run mode: the spec is synthesised from explicit arguments; section → flag name.
        self.cli_sections = cli_sections
        self.components = _ComponentResolver(self)
        self.checks = _RequestChecks(self)

    def cli_json(self, params: Mapping[str, Any] | None, section: str, flag: str) -> dict[str, Any]:
        """A JSON override with its whole-field ``${VAR}`` values substituted, as in files (R6)."""
        data, info = interpolate(
            dict(params or {}), self.environ, span_of=lambda rel: None, abs_prefix=(section,), display_prefix=(flag,)
        )
        self.diagnostics.extend(info.diagnostics)
        return dict(data)

    # -- fragments --

    def frag(self, layer: str, doc: SourceDoc, base: Path_) -> _Frag | None:
        """The interpolated mapping at ``base`` in ``doc`` (None when absent or null)."""
        key = (id(doc), base)
        if key in self._frag_cache:
            return self._frag_cache[key]
        value: Any = doc.data
        for part in base:
            if isinstance(value, dict) and isinstance(part, str):
                value = value.get(part)
            elif isinstance(value, list) and isinstance(part, int) and part < len(value):
                value = value[part]
            else:
                value = None
            if value is None:
                break
        frag: _Frag | None = None
        if isinstance(value, dict):
            synthetic = self.cli_sections is not None and doc is self.spec
            data, info = interpolate(
                value,
                self.environ,
                span_of=(lambda rel: None) if synthetic else (lambda rel: doc.span_of((*base, *rel))),
                abs_prefix=_semantic_prefix(doc, base),
                secret_paths=frozenset(p[len(base) :] for p in doc.secret_paths if p[: len(base)] == base),
                literal_paths=frozenset(p[len(base) :] for p in doc.literal_paths if p[: len(base)] == base),
                display_prefix=None if synthetic else base,
            )
            self.diagnostics.extend(info.diagnostics)
            if synthetic:
                assert self.cli_sections is not None
                flag = self.cli_sections.get(str(base[-1]), "command line")
                frag = _Frag("command line", "cli", data, base=base, flag=flag, interp=info)
            else:
                frag = _Frag(layer, "file", data, doc=doc, base=base, subst=info.substituted, interp=info)
        self._frag_cache[key] = frag
        return frag

    def interpolation_of(self, frags: Sequence[_Frag]) -> tuple[set[str], set[str]]:
        env_inputs: set[str] = set()
        secret_refs: set[str] = set()
        for f in frags:
            if f.interp is not None:
                env_inputs |= f.interp.env_inputs
                secret_refs |= f.interp.secret_refs
        return env_inputs, secret_refs

    def config_frags(self, section: Path_) -> list[_Frag]:
        out = []
        for cfg in self.configs:
            f = self.frag(cfg.layer, cfg.doc, section)
            if f is not None:
                out.append(f)
        return out

    # -- entry point --

    def resolve(self) -> Compiled:
        data = self.spec.data
        name = data.get("name") if isinstance(data.get("name"), str) else _stem(self.spec.path)
        tc, tc_chain = self.task_concurrency()
        runtime, runtime_prov = self.orchestration_runtime()
        requests: list[tuple[str, RunRequest, dict[str, list[Contribution]]]] = []
        for index, raw in enumerate(data.get("requests") or []):
            try:
                resolved = self.request(index, raw, tc, tc_chain)
            except AcxUserError as exc:
                self.diagnostics.extend(exc.diagnostics)
                continue
            if resolved is not None:
                requests.append(resolved)
        if any(d.severity == "error" for d in self.diagnostics):
            raise AcxResolutionError(diagnostics=[d for d in unique(self.diagnostics) if d.severity == "error"])
        assert runtime is not None
        runtime, runtime_prov = _used_providers_only(runtime, runtime_prov, {r.environment.id for _, r, _ in requests})
        orch_id = orchestration_id(name, tc, [(n, r) for n, r, _ in requests])
        orchestration = Orchestration(
            id=orch_id,
            name=name,
            task_concurrency=tc,
            runtime=runtime,
            requests=[
                OrchestratedRun(key=f"{orch_id}/{i}", index=i, name=n, request=r)
                for i, (n, r, _) in enumerate(requests)
            ],
        )
        orch_prov = dict(runtime_prov)
        orch_prov["task_concurrency"] = tc_chain
        docs = [self.spec, *(c.doc for c in self.configs)]
        base_dir = os.path.dirname(os.path.abspath(self.spec.path))
        return Compiled(
            orchestration=orchestration,
            provenance={n: p for n, _, p in requests},
            sources={d.path: d.text for d in docs if d.text is not None},
            base_dirs={n: base_dir for n, _, _ in requests},
            orchestration_provenance=orch_prov,
            spec_path=self.spec.path,
            config_paths=tuple(c.doc.path for c in self.configs),
            warnings=tuple(unique(self.diagnostics)),
        )

    # -- orchestration level --

    def task_concurrency(self) -> tuple[int, list[Contribution]]:
        chain = [Contribution(layer="default", kind="default", source="ExecutionSpec default", value=32)]
        value: Any = 32
        span: Span | None = None
        for cfg in self.configs:
            execution = cfg.doc.data.get("execution")
            if isinstance(execution, dict) and "task_concurrency" in execution:
                frag = self.frag(cfg.layer, cfg.doc, ("execution",))
                if frag is not None:
                    value = frag.data["task_concurrency"]
                    span = frag.span(("task_concurrency",))
                    chain.append(
                        Contribution(
                            layer=cfg.layer,
                            kind="file",
                            source=frag.source(("task_concurrency",)),
                            value=value,
                        )
                    )
        if "task_concurrency" in self.spec.data:
            raw = self.spec.data["task_concurrency"]
            data, info = interpolate(
                {"task_concurrency": raw}, self.environ, span_of=lambda rel: self.spec.span_of(rel)
            )
            self.diagnostics.extend(info.diagnostics)
            value = data["task_concurrency"]
            span = self.spec.span_of(("task_concurrency",))
            source = str(span) + (f" via ${{{info.substituted[('task_concurrency',)]}}}" if info.substituted else "")
            chain.append(Contribution(layer="orchestration", kind="file", source=source, value=value))
        if self.cli_task_concurrency is not None:
            value = self.cli_task_concurrency
            span = None
            chain.append(Contribution(layer="command line", kind="cli", source="--task-concurrency", value=value))
        try:
            tc = msgspec.convert(value, int, strict=False)
        except msgspec.ValidationError:
            tc = 0
        if isinstance(value, bool) or tc < 1:
            self.diagnostics.append(
                Diagnostic(
                    code="E0204",
                    message=f"task_concurrency must be an integer >= 1, got `{value}`",
                    span=span,
                    path="task_concurrency" if span else "--task-concurrency",
                    help="set the number of attempts that may run at the same time, e.g. 8",
                )
            )
            tc = 1
        return tc, chain

    def orchestration_runtime(self) -> tuple[ResolvedRuntimeOptions | None, dict[str, list[Contribution]]]:
        defaults = field_defaults(ResolvedRuntimeOptions)
        merger = _Merger(lambda rel: ("runtime", *rel), lambda p: False)
        merger.add(_Frag("default", "default", defaults, flag="runtime default"))
        for frag in self.config_frags(("runtime",)):
            merger.add(_without(frag, RUNTIME_REUSE_KEYS))
        spec_frag = self.frag("orchestration", self.spec, ("runtime",))
        if spec_frag is not None:
            merger.add(spec_frag)
        if self.runtime_params:
            merger.add(_Frag("command line", "cli", self.runtime_params, flag="--runtime-params"))
        value = self.convert(merger, ResolvedRuntimeOptions, ("runtime",), "the orchestration runtime", None)
        if value is None:
            return None, {}
        self.refuse_unsupported(value, merger, ("runtime",), UNSUPPORTED_RUNTIME, "the orchestration runtime")
        return value, _chains(merger, msgspec.to_builtins(value), ("runtime",))

    # -- one request --

    def request(
        self, index: int, raw: Any, tc: int, tc_chain: list[Contribution]
    ) -> tuple[str, RunRequest, dict[str, list[Contribution]]] | None:
        name = raw["name"]
        label = f"request `{name}`"
        base: Path_ = ("requests", index)
        req_span = self.spec.span_of(base)
        used: list[_Frag] = []
        prov: dict[str, list[Contribution]] = {}

        def section(key: str) -> list[_Frag]:
            frags = []
            for layer, path in (
                ("orchestration defaults", ("defaults", key)),
                (f"request `{name}`", (*base, key)),
            ):
                f = self.frag(layer, self.spec, path)
                if f is not None:
                    frags.append(f)
            used.extend(frags)
            return frags

        model_frags = section("model")
        model, p = self.simple(ModelSpec, "model", model_frags, label, req_span)
        prov.update(p)
        if model is not None:
            self.checks.check_cache_used(model, model_frags, label, req_span)
        benchmark, p = self.components.component("benchmark", section("benchmark"), label, req_span, used)
        prov.update(p)
        harness_frags = section("harness")
        self.harness_alias = None
        harness, p = self.components.component("harness", harness_frags, label, req_span, used)
        prov.update(p)
        if model is not None and harness is not None:
            self.checks.require_model(model, harness, harness_frags, label, req_span, format_path((*base, "model")))
        environment, p = self.components.environment(section("environment"), label, req_span, used)
        prov.update(p)
        execution, p = self.execution(section("execution"), tc, label, req_span, used)
        prov.update(p)
        prov["execution.task_concurrency"] = list(tc_chain)
        runtime, p = self.run_runtime(section("runtime"), label, req_span, used)
        prov.update(p)
        output, p = self.simple(OutputSpec, "output", section("output"), label, req_span)
        prov.update(p)
        if None in (model, benchmark, harness, environment, execution, runtime, output):
            return None
        env_inputs, secret_refs = self.interpolation_of(used)
        metadata = RunMetadata(
            config_path=[os.path.abspath(c.doc.path) for c in self.configs],
            recipe_dirs=list(self._recipe_dirs()),
            request_name=name,
            spec_path=os.path.abspath(self.spec.path),
            env_inputs=sorted(env_inputs),
            secret_refs=sorted(secret_refs),
            harness_alias=self.harness_alias,
        )
        request = RunRequest(
            model=model,
            benchmark=benchmark,
            harness=harness,
            environment=environment,
            execution=execution,
            runtime=runtime,
            output=output,
            metadata=metadata,
        )
        return name, request, prov

    def _recipe_dirs(self) -> list[str]:
        dirs: list[str] = []
        frags = [*self.config_frags(("runtime",))]
        spec_frag = self.frag("orchestration", self.spec, ("runtime",))
        if spec_frag is not None:
            frags.append(spec_frag)
        if "recipe_dirs" in self.runtime_params:
            frags.append(_Frag("command line", "cli", self.runtime_params, flag="--runtime-params"))
        for f in frags:
            value = f.data.get("recipe_dirs")
            if isinstance(value, list):
                # Relative dirs resolve against the file that declares them (CLI values stay as given).
                base = os.path.dirname(os.path.abspath(f.doc.path)) if f.doc is not None else ""
                dirs = [
                    d if os.path.isabs(d) or not base else os.path.normpath(os.path.join(base, d))
                    for d in value
                    if isinstance(d, str)
                ]
        return dirs

    def simple(
        self,
        cls: type[Any],
        key: str,
        frags: list[_Frag],
        label: str,
        fallback: Span | None,
    ) -> tuple[Any, dict[str, list[Contribution]]]:
        merger = _Merger(lambda rel: (key, *rel), lambda p: False)
        merger.add(_Frag("default", "default", field_defaults(cls), flag=f"{cls.__name__} default"))
        for f in frags:
            merger.add(f)
        value = self.convert(merger, cls, (key,), label, fallback)
        if value is None:
            return None, {}
        return value, _chains(merger, msgspec.to_builtins(value), (key,))

    def refuse_unsupported(
        self, value: Any, merger: _Merger, prefix: Path_, fields: Mapping[str, tuple[Any, str]], label: str
    ) -> None:
        """E0311 for an AgentCompass field acx reads but does not implement, set by some layer to a
        value other than the one acx behaves as (nothing accepted and silently ignored)."""
        for name, (inert, instead) in fields.items():
            if not hasattr(value, name) or getattr(value, name) == inert:
                continue
            rec = merger.winner((*prefix, name))
            if rec is None or rec.kind == "default":
                continue
            where = ".".join(str(p) for p in (*prefix, name)).replace(".params.", ".")
            span = rec.key_span or rec.span
            by = "" if span is not None else f" (set by {rec.source})"
            self.diagnostics.append(
                Diagnostic(
                    code="E0311",
                    message=f"{label}: `{where}` is not supported by acx{by}",
                    span=span,
                    path=where,
                    help=instead,
                )
            )

    def execution(
        self, frags: list[_Frag], tc: int, label: str, fallback: Span | None, used: list[_Frag]
    ) -> tuple[Any, dict[str, list[Contribution]]]:
        merger = _Merger(lambda rel: ("execution", *rel), lambda p: False)
        defaults = {k: v for k, v in field_defaults(ExecutionSpec).items() if k != "task_concurrency"}
        merger.add(_Frag("default", "default", defaults, flag="ExecutionSpec default"))
        for f in self.config_frags(("execution",)):
            used.append(f)
            merger.add(_artifacts(_without(f, ("task_concurrency",))))
        for f in frags:
            merger.add(_artifacts(f))
        if self.execution_params:
            merger.add(_artifacts(_Frag("command line", "cli", self.execution_params, flag="--execution-params")))
        data = {**merger.data, "task_concurrency": tc}
        value = self.convert_data(data, ExecutionSpec, merger, ("execution",), label, fallback)
        if value is None:
            return None, {}
        self.refuse_unsupported(value, merger, ("execution",), UNSUPPORTED_EXECUTION, label)
        final = {k: v for k, v in msgspec.to_builtins(value).items() if k != "task_concurrency"}
        return value, _chains(merger, final, ("execution",))

    def run_runtime(
        self, frags: list[_Frag], label: str, fallback: Span | None, used: list[_Frag]
    ) -> tuple[Any, dict[str, list[Contribution]]]:
        merger = _Merger(lambda rel: ("runtime", *rel), lambda p: False)
        merger.add(_Frag("default", "default", field_defaults(RunRuntimeSpec), flag="RunRuntimeSpec default"))
        for f in self.config_frags(("runtime",)):
            used.append(f)
            merger.add(_only(f, RUNTIME_REUSE_KEYS))
        for f in frags:
            merger.add(f)
        if merger.data.get("reuse_run_id"):
            # A named run to reuse implies reuse (reference §2.3).
            merger.add(
                _Frag("implied by runtime.reuse_run_id", "planner", {"reuse": True}, flag="runtime.reuse_run_id")
            )
        value = self.convert(merger, RunRuntimeSpec, ("runtime",), label, fallback)
        if value is None:
            return None, {}
        return value, _chains(merger, msgspec.to_builtins(value), ("runtime",))

    # -- typed conversion with spans --

    def convert(self, merger: _Merger, cls: type[Any], prefix: Path_, label: str, fallback: Span | None) -> Any:
        return self.convert_data(merger.data, cls, merger, prefix, label, fallback)

    def _reported_unset(self, name: str) -> bool:
        """Whether an E0302 (``name`` is not set) was already reported."""
        needle = f"`{name}` is not set"
        return any(d.code == "E0302" and needle in d.message for d in self.diagnostics)

    def convert_data(
        self, data: Any, cls: type[Any], merger: _Merger, prefix: Path_, label: str, fallback: Span | None
    ) -> Any:
        try:
            # Lax mode only matters for values substituted from the environment (strings):
            # every file value was already checked strictly by validate_document.
            value = msgspec.convert(data, cls, strict=False)
        except msgspec.ValidationError as exc:
            msg, sub = split_msgspec_error(str(exc))
            full = (*prefix, *sub)
            span = fallback
            if msg.startswith("object contains unknown field"):
                key = msg.split("`")[1] if "`" in msg else ""
                rec = merger.winner((*full, key))
                span = rec.key_span if rec and rec.key_span else span
            else:
                rec = merger.winner(full)
                if rec is not None and rec.span is not None:
                    span = rec.span
                ref = env_ref_name(value_at(data, sub))
                if ref is not None and self._reported_unset(ref):
                    return None  # a `${VAR}` left unsubstituted: its E0302 says all (no cascade)
                if ref is not None:  # kept as a secret reference: it can only fill a string
                    where = format_path(full)
                    self.diagnostics.append(
                        Diagnostic(
                            code="E0204",
                            message=f"{label}: `{where}` cannot take the secret reference `${{{ref}}}` "
                            f"({msg}): a secret is resolved only where it is used, as a string",
                            span=span,
                            path=where,
                            help="write the value, or use a variable whose name does not look like a "
                            'secret (see docs/configuration.md, "Secrets in output")',
                        )
                    )
                    return None
            where = format_path(full)
            code = "E0204"
            if msg.startswith("object contains unknown field"):
                # A layer written for another component id (e.g. `defaults.environment` params
                # without an id, which apply to every provider): name the key and who set it.
                key = msg.split("`")[1] if "`" in msg else "?"
                code, where = "E0203", format_path((*full, key))
                layer = f" (set by {rec.layer})" if rec is not None else ""
                known = getattr(cls, "__struct_fields__", ())
                guess = did_you_mean(key, known)
                message = f"{label}: unknown key `{key}`{layer}"
                help = (f"did you mean `{guess}`? " if guess else "") + (
                    "params sit beside the id they belong to: give that section its own `id`, or move "
                    "the key to the requests that use it"
                )
            elif msg.startswith("object missing required field"):
                field_name = msg.split("`")[1] if "`" in msg else "?"
                message = f"{label} is missing required parameter `{field_name}`"
                help = f"set `{field_name}` in the request, in `defaults`, or in a config file"
            else:
                message = f"{label}: `{where}`: {msg}"
                help = "fix the value (see `acx config docs` for the field's type)"
            self.diagnostics.append(Diagnostic(code=code, message=message, span=span, path=where, help=help))
            return None
        # Values substituted from the environment were not seen by validate_document: `T=inf` for
        # a budget, or a variable holding non-UTF-8 bytes (lone surrogates after decoding).
        bad = list(_unfit_scalars(msgspec.to_builtins(value), ()))
        if isinstance(value, EnvironmentSpec):  # judged on the merged policy: layers may split it
            bad.extend(_unfit_policies(value))
        if isinstance(value, ExecutionSpec):  # a `${VAR}` pattern is first seen here
            for i, pattern in enumerate(value.retry_pattern_list or []):
                problem = regex_problem(pattern)
                if problem is not None:
                    bad.append(
                        (
                            ("retry_pattern_list", i),
                            f"invalid regular expression {pattern!r}: {problem}",
                            "use Python `re` syntax",
                        )
                    )
        for sub, problem, help in bad:
            full = (*prefix, *sub)
            rec = merger.winner(full)
            span = rec.span if rec is not None and rec.span is not None else fallback
            where = format_path(full)
            self.diagnostics.append(
                Diagnostic(code="E0204", message=f"{label}: `{where}`: {problem}", span=span, path=where, help=help)
            )
        return None if bad else value


class _ComponentResolver:
    """The benchmark, harness and environment sections of a request: the id each layer selects,
    its params through the config layers, AgentCompass harness ids, and ``--env``."""

    def __init__(self, c: _Resolver) -> None:
        self.c = c

    def select_id(
        self, key: str, frags: list[_Frag], default: str | None, label: str, fallback: Span | None
    ) -> tuple[str | None, list[Contribution], list[_Frag]]:
        """The component id (request beats defaults) and the fragments whose params apply."""
        chain: list[Contribution] = []
        cid: str | None = None
        if default is not None:
            cid = default
            chain.append(Contribution(layer="default", kind="default", source="default", value=default))
        for f in frags:
            if "id" in f.data:
                cid = f.data["id"]
                chain.append(Contribution(layer=f.layer, kind=f.kind, source=f.source(("id",)), value=cid))
        if cid is None:
            kind = "harness" if key == "harness" else key
            self.c.diagnostics.append(
                Diagnostic(
                    code="E0305",
                    message=f"{label} selects no {kind}",
                    span=fallback,
                    help=select_help(key, self.c.spec.path),
                )
            )
            return None, chain, []
        # `defaults.<section>` params apply only when it selects the same id (or none).
        applied = [f for f in frags if f.data.get("id", cid) == cid]
        return cid, chain, applied

    def component(
        self, key: str, frags: list[_Frag], label: str, fallback: Span | None, used: list[_Frag]
    ) -> tuple[Any, dict[str, list[Contribution]]]:
        from acx.components import registry

        cid, id_chain, applied = self.select_id(key, frags, None, label, fallback)
        if cid is None:
            return None, {}
        if key == "harness":
            from acx.components import mapped_harness

            alias = mapped_harness(cid)
            if alias is not None:
                return self.agentcompass_harness(alias, id_chain, applied, label, fallback, used)
        info = registry(key).get(cid)
        if info is None:
            return None, {}  # reported by validate_document
        section = {"benchmark": "benchmarks", "harness": "harnesses"}[key]
        merger = _Merger(lambda rel: (key, "params", *rel), lambda p: False)
        merger.add(_Frag("default", "default", field_defaults(info.config_class), flag=f"{cid} default"))
        for f in self.component_config_frags(section, cid):
            used.append(f)
            merger.add(f)
        for f in applied:
            merger.add(_without(f, ("id",)))
        params = self.c.convert(merger, info.config_class, (key, "params"), f"{label} {key} `{cid}`", fallback)
        if params is None:
            return None, {}
        if key == "benchmark":
            self.c.refuse_unsupported(params, merger, (key, "params"), UNSUPPORTED_BENCHMARK, f"{label} {key} `{cid}`")
        builtins = msgspec.to_builtins(params)
        spec_cls = BenchmarkSpec if key == "benchmark" else HarnessSpec
        prov = {f"{key}.id": id_chain, **_chains(merger, builtins, (key, "params"))}
        return spec_cls(id=cid, params=builtins), prov

    def agentcompass_harness(
        self,
        alias: MappedHarness,
        id_chain: list[Contribution],
        applied: list[_Frag],
        label: str,
        fallback: Span | None,
        used: list[_Frag],
    ) -> tuple[Any, dict[str, list[Contribution]]]:
        """An AgentCompass harness id acx maps (issue 23 item 5): its AgentCompass params are
        layered like any component's (config ``harnesses.<id>`` → defaults → request), typed by
        their AgentCompass class, refused where acx has no meaning for the value (E0311), and
        translated into the acx harness's params. Provenance shows the mapping; the request's
        ``metadata.harness_alias`` keeps the id."""
        from acx.components import HARNESSES

        cid = alias.id
        prefix: Path_ = ("harness", "params")
        merger = _Merger(lambda rel: (*prefix, *rel), lambda p: False)
        merger.add(_Frag("default", "default", field_defaults(alias.config), flag=f"{cid} (AgentCompass) default"))
        for f in self.component_config_frags("harnesses", cid):
            used.append(f)
            merger.add(f)
        for f in applied:
            merger.add(_without(f, ("id",)))
        where = f"{label} harness `{cid}`"
        ac_params = self.c.convert(merger, alias.config, prefix, where, fallback)
        if ac_params is None:
            return None, {}
        self.refuse_agentcompass(ac_params, alias, merger, label)
        translated = alias.translate(ac_params)
        data = {**alias.fixed, **{name: t.value for name, t in translated.items()}}
        info = HARNESSES[alias.target]
        params = self.c.convert_data(data, info.config_class, merger, prefix, where, fallback)
        if params is None:
            return None, {}
        self.c.harness_alias = cid
        mapping = f"harness `{cid}` (AgentCompass id) → {alias.summary}"
        via = "AgentCompass alias"
        ac_chains = _chains(merger, msgspec.to_builtins(ac_params), prefix)
        defaults = field_defaults(info.config_class)
        builtins = msgspec.to_builtins(params)
        prov: dict[str, list[Contribution]] = {
            "harness.id": [*id_chain, Contribution(layer=via, kind="harness", source=mapping, value=alias.target)]
        }
        for name, value in builtins.items():
            chain = [
                Contribution(
                    layer="default", kind="default", source=f"{alias.target} default", value=defaults.get(name)
                )
            ]
            if name in alias.fixed:
                chain.append(Contribution(layer=via, kind="harness", source=mapping, value=value))
            elif name in translated:
                sources = translated[name].sources
                for src in sources:
                    chain.extend(c for c in ac_chains.get(format_path((*prefix, src)), []) if c.kind != "default")
                names = ", ".join(f"`{s}`" for s in sources)
                chain.append(
                    Contribution(layer=via, kind="harness", source=f"{mapping}; from {cid} {names}", value=value)
                )
            prov[format_path((*prefix, name))] = chain
        return HarnessSpec(id=alias.target, params=builtins), prov

    def refuse_agentcompass(self, params: Any, alias: MappedHarness, merger: _Merger, label: str) -> None:
        """E0311 for an AgentCompass param set (by some layer) to a value acx cannot honour."""
        for name, (accepted, instead) in alias.unsupported.items():
            value = msgspec.to_builtins(getattr(params, name))
            if value in accepted:
                continue
            rec = merger.winner(("harness", "params", name))
            if rec is None or rec.kind == "default":
                continue
            span = rec.key_span or rec.span
            by = "" if span is not None else f" (set by {rec.source})"
            shown = f"`{value}`" if value is not None else "null"
            self.c.diagnostics.append(
                Diagnostic(
                    code="E0311",
                    message=f"{label}: AgentCompass harness `{alias.id}` param `harness.{name}` = {shown} has no "
                    f"acx meaning (it maps to {alias.summary}){by}",
                    span=span,
                    path=f"harness.{name}",
                    help=instead or f"remove `{name}`",
                )
            )

    def environment(
        self, frags: list[_Frag], label: str, fallback: Span | None, used: list[_Frag]
    ) -> tuple[Any, dict[str, list[Contribution]]]:
        from acx.drivers import DRIVERS as ENVIRONMENTS

        cid, id_chain, applied = self.select_id("environment", frags, DEFAULT_ENVIRONMENT, label, fallback)
        if self.c.environment_override is not None:
            cid, applied = self.override_environment(cid, frags, id_chain, label)
        if cid is None or cid not in ENVIRONMENTS:
            return None, {}
        info = ENVIRONMENTS[cid]

        def prefix(rel: Path_) -> Path_:
            if rel and rel[0] in ENVIRONMENT_SPEC_FIELDS:
                return ("environment", *rel)
            return ("environment", "params", *rel)

        def atomic(full: Path_) -> bool:
            return len(full) == 2 and full[1] in NETWORK_POLICY_FIELDS

        merger = _Merger(prefix, atomic)
        spec_defaults = field_defaults(EnvironmentSpec)
        shared = {k: v for k, v in spec_defaults.items() if k in ENVIRONMENT_SPEC_FIELDS}
        merger.add(_Frag("default", "default", shared, flag="EnvironmentSpec default"))
        merger.add(_Frag("default", "default", field_defaults(info.config_class), flag=f"{cid} default"))
        for f in self.component_config_frags("environments", cid):
            used.append(f)
            merger.add(_policies(f))
        for f in applied:
            merger.add(_policies(_without(f, ("id",))))
        flat = merger.data
        spec_part = {k: v for k, v in flat.items() if k in ENVIRONMENT_SPEC_FIELDS}
        param_part = {k: v for k, v in flat.items() if k not in ENVIRONMENT_SPEC_FIELDS}
        where = f"{label} environment `{cid}`"
        params = self.c.convert_data(param_part, info.config_class, merger, ("environment", "params"), where, fallback)
        if params is not None:
            self.config_warnings(params, merger, label, fallback)
        spec_data = {
            "id": cid,
            "params": msgspec.to_builtins(params) if params is not None else {},
            **spec_part,
        }
        spec = self.c.convert_data(spec_data, EnvironmentSpec, merger, ("environment",), where, fallback)
        if params is None or spec is None:
            return None, {}
        self.check_fresh_only(spec, merger, label)
        final = {k: v for k, v in msgspec.to_builtins(spec).items() if k != "id"}
        prov = {"environment.id": id_chain, **_chains(merger, final, ("environment",))}
        return spec, prov

    def config_warnings(self, params: Any, merger: _Merger, label: str, fallback: Span | None) -> None:
        """W0304 for each risky-but-valid provider setting (the driver's config says which)."""
        hook = getattr(params, "config_warnings", None)
        for field_name, message in hook() if callable(hook) else []:
            rec = merger.winner(("environment", field_name))
            self.c.diagnostics.append(
                Diagnostic(
                    code="W0304",
                    severity="warning",
                    message=f"{label}: {message}",
                    span=rec.span if rec is not None and rec.span is not None else fallback,
                    path=f"environment.{field_name}",
                    help="leave it unset: commands get PATH, HOME, LANG, TMPDIR and the variables the plan "
                    "declares (env_variables, run_env_variables, ...); pass what an agent needs there",
                )
            )

    def override_environment(
        self, selected: str | None, frags: list[_Frag], id_chain: list[Contribution], label: str
    ) -> tuple[str, list[_Frag]]:
        """``--env ID`` replaces the provider. Shared EnvironmentSpec fields (mode, network
        policies, setup, env maps) written for the replaced provider still apply; its
        provider-native params do not (they belong to another provider), with a warning."""
        cid = self.c.environment_override
        assert cid is not None
        id_chain.append(Contribution(layer="--env", kind="cli", source="--env", value=cid))
        applied: list[_Frag] = []
        dropped: list[str] = []
        for f in frags:
            if f.data.get("id", cid) == cid:
                applied.append(f)
                continue
            shared = {k: v for k, v in f.data.items() if k in ENVIRONMENT_SPEC_FIELDS}
            dropped.extend(sorted(k for k in f.data if k not in ENVIRONMENT_SPEC_FIELDS and k != "id"))
            applied.append(replace(f, data=shared))
        if dropped:
            self.c.diagnostics.append(
                Diagnostic(
                    code="W0303",
                    severity="warning",
                    message=f"{label}: --env {cid} replaces environment `{selected}`; its provider params "
                    f"{', '.join(f'`{k}`' for k in dropped)} are not applied",
                    path="--env",
                    help=f"set params for `{cid}` under `environments.{cid}` in a run config",
                )
            )
        return cid, applied

    def component_config_frags(self, table: str, cid: str) -> list[_Frag]:
        """Config layers of component ``cid`` in ``table`` (``benchmarks``, ``harnesses``,
        ``environments``); a later ``<table>: null`` or ``<table>.<id>: null`` drops the earlier
        ones (reference §3.1 for environments; R5 — a later null replaces — for the others)."""
        out: list[_Frag] = []
        for cfg in self.c.configs:
            if _present(cfg.doc.data, (table, cid)) and value_at(cfg.doc.data, (table, cid)) is None:
                out = []
                continue
            f = self.c.frag(cfg.layer, cfg.doc, (table, cid))
            if f is not None:
                out.append(f)
        return out

    def check_fresh_only(self, spec: EnvironmentSpec, merger: _Merger, label: str) -> None:
        mode = spec.evaluation_environment_mode
        if mode in (None, "fresh"):
            return
        for name in _EVALUATION_ONLY_FIELDS:
            if getattr(spec, name) is None:
                continue
            rec = merger.winner(("environment", name))
            if rec is None or rec.kind == "default":
                continue
            self.c.diagnostics.append(
                Diagnostic(
                    code="E0308",
                    message=f"{label}: `environment.{name}` requires evaluation_environment_mode `fresh`, "
                    f"but the mode is `{mode}`",
                    span=rec.key_span or rec.span,
                    help="set `evaluation_environment_mode: fresh`, or remove the evaluation-only field",
                )
            )


class _RequestChecks:
    """Whole-request checks that need the resolved sections: a model for a harness that needs
    one (E0306), a model cache some role uses (W0306)."""

    def __init__(self, c: _Resolver) -> None:
        self.c = c

    def check_cache_used(self, model: ModelSpec, frags: list[_Frag], label: str, fallback: Span | None) -> None:
        """W0306: a cache directory or size bound while every role's ``cache`` is ``off`` is
        accepted but does nothing (nothing silently ignored: say so where it is written)."""
        if model.cache != "off" or any(r.cache != "off" for r in model.roles.values()):
            return
        for key in ("cache_dir", "cache_max_bytes"):
            if getattr(model, key) is None:
                continue
            span = next((f.key_span((key,)) for f in reversed(frags) if key in f.data), None)
            self.c.diagnostics.append(
                Diagnostic(
                    code="W0306",
                    severity="warning",
                    message=f"{label}: `model.{key}` is set but no model role uses the model-call cache "
                    "(every `cache` is `off`), so it has no effect",
                    span=span or fallback,
                    path=f"model.{key}",
                    help="set `cache: read-write` (or read, write, replay) on `model` or a `model.roles` entry, "
                    f"or remove `{key}`",
                )
            )

    def require_model(
        self,
        model: ModelSpec,
        harness: HarnessSpec,
        frags: list[_Frag],
        label: str,
        fallback: Span | None,
        path: str,
    ) -> None:
        """E0306 for a harness that cannot run without a model when the request configures none:
        compiled, it would fail every task at run time. An endpoint given as ``${VAR}`` counts as
        configured (resolved when the run starts)."""
        from acx.components import HARNESSES

        if model.id or model.base_url or "agent" in model.roles:
            return
        info = HARNESSES.get(harness.id)
        try:
            cls = info.load() if info is not None else None
        except (ImportError, AttributeError):
            return  # the planner reports a harness that does not load
        if cls is None or not (cls.requires_model or cls.calls_model):
            return
        id_frag = next((f for f in reversed(frags) if "id" in f.data), None)
        span = id_frag.span(("id",)) if id_frag is not None else None
        by = "" if span is not None or id_frag is None else f" (set by {id_frag.source(('id',))})"
        self.c.diagnostics.append(
            Diagnostic(
                code="E0306",
                message=f"{label}: harness `{harness.id}` needs a model{by}, but no model is configured",
                span=span or fallback,
                path=path,
                help=_model_help(self.c.spec.path),
            )
        )


# ---- helpers ----------------------------------------------------------------------------------


def _unfit_scalars(value: Any, path: Path_) -> Iterator[tuple[Path_, str, str]]:
    """(path, problem, help) of each non-finite number and each string with a lone surrogate."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _unfit_scalars(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _unfit_scalars(v, (*path, i))
    elif isinstance(value, float) and not math.isfinite(value):
        yield path, f"expected a finite number, got `{value}`", "budgets and counts are finite numbers"
    elif isinstance(value, str) and (lone := lone_surrogate(value)) is not None:
        yield (
            path,
            f"invalid string: `\\u{ord(lone):04x}` is a lone UTF-16 surrogate (not UTF-8 text?)",
            "a value taken from an environment variable must be UTF-8 text",
        )


def _unfit_policies(spec: EnvironmentSpec) -> Iterator[tuple[Path_, str, str]]:
    """(path, problem, help) of each network policy whose host lists do not fit its mode: hosts
    given to a mode that ignores them, or a ``denylist`` that denies nothing (issue 24 item 10)."""
    for name in sorted(NETWORK_POLICY_FIELDS):
        policy = getattr(spec, name)
        if policy is None:
            continue
        mode = policy.network_mode
        if policy.allowed_hosts and mode != "allowlist":
            yield (
                (name, "allowed_hosts"),
                f"`allowed_hosts` is only used by `allowlist`, and this policy is `{mode}`",
                "set `network_mode = allowlist`, or write the hosts to deny as `denied_hosts`"
                if mode == "denylist"
                else "set `network_mode = allowlist`, or remove `allowed_hosts`",
            )
        if policy.denied_hosts and mode != "denylist":
            yield (
                (name, "denied_hosts"),
                f"`denied_hosts` is only used by `denylist`, and this policy is `{mode}`",
                "set `network_mode = denylist`, or remove `denied_hosts`",
            )
        if mode == "denylist" and not policy.denied_hosts and not policy.allowed_hosts:
            yield (
                (name, "network_mode"),
                "a `denylist` with no `denied_hosts` denies nothing",
                'list the destinations to deny (`denied_hosts = ["example.com"]`), or use `public`',
            )


def _without(frag: _Frag, keys: Sequence[str]) -> _Frag:
    return replace(frag, data={k: v for k, v in frag.data.items() if k not in keys})


def _only(frag: _Frag, keys: Sequence[str]) -> _Frag:
    return replace(frag, data={k: v for k, v in frag.data.items() if k in keys})


def _policies(frag: _Frag) -> _Frag:
    """NetworkPolicy string shorthand: ``run_network_policy: no-network`` → ``{network_mode: ...}``."""
    data = dict(frag.data)
    for key in NETWORK_POLICY_FIELDS:
        if isinstance(data.get(key), str):
            data[key] = {"network_mode": data[key]}
    return replace(frag, data=data)


def _artifacts(frag: _Frag) -> _Frag:
    """ArtifactSpec string shorthand: ``"/app/out"`` → ``{source: "/app/out"}`` (A4)."""
    items = frag.data.get("artifacts")
    if not isinstance(items, list):
        return frag
    data = dict(frag.data)
    data["artifacts"] = [{"source": a} if isinstance(a, str) else a for a in items]
    return replace(frag, data=data)


def _semantic_prefix(doc: SourceDoc, base: Path_) -> Path_:
    """The path that decides sensitivity/env-map membership (``requests[0].model`` → ``model``)."""
    if doc.kind == "orchestration" and base[:1] == ("requests",):
        return tuple(base[2:])
    if doc.kind == "orchestration" and base[:1] == ("defaults",):
        return tuple(base[1:])
    return base


#: Per-provider runtime maps the resolver fills with every registered driver's default.
_PROVIDER_MAPS = ("provider_limits", "env_open_qps")


def _used_providers_only(
    runtime: ResolvedRuntimeOptions, prov: dict[str, list[Contribution]], used: set[str]
) -> tuple[ResolvedRuntimeOptions, dict[str, list[Contribution]]]:
    """``runtime.provider_limits``/``env_open_qps`` without the defaults of providers no request
    uses: the plan (and its content hash) must not list, nor depend on, every installed driver.
    A value some layer set explicitly stays, used or not (the user wrote it; explain shows it)."""

    def keep(field_name: str, provider: str) -> bool:
        chain = prov.get(f"runtime.{field_name}.{provider}") or []
        return provider in used or any(c.kind != "default" for c in chain)

    changes = {f: {p: v for p, v in getattr(runtime, f).items() if keep(f, p)} for f in _PROVIDER_MAPS}
    dropped = {f"runtime.{f}.{p}" for f in _PROVIDER_MAPS for p in getattr(runtime, f) if p not in changes[f]}
    return msgspec.structs.replace(runtime, **changes), {k: v for k, v in prov.items() if k not in dropped}


def _model_help(doc_path: str) -> str:
    """How to configure the request's model, in the syntax of the spec (.acx or YAML)."""
    if doc_path.endswith(".acx"):
        where = 'add `model { id = "MODEL"  base_url = env("URL") }` to the run or to `defaults`'
    elif doc_path == "<command line>":
        where = "pass `model` (and `model_params` with `base_url`) to compile_run"
    else:
        where = 'add `model: {id: MODEL, base_url: URL, api_key: "${KEY}"}` to the request or to `defaults`'
    return f"{where}; a program that needs no model runs with harness `command`"


def _stem(path: str) -> str:
    name = os.path.basename(path)
    return name.split(".", 1)[0] or "orchestration"


def orchestration_id(name: str, task_concurrency: int, requests: Sequence[tuple[str, RunRequest]]) -> str:
    """Content-derived id: first 12 hex of sha256 over name, task_concurrency and the requests.

    Machine-specific metadata (absolute spec/config paths) is left out, so the same spec
    compiles to the same id on every machine and through either front end (.acx or YAML).
    """
    body = {
        "name": name,
        "task_concurrency": task_concurrency,
        "requests": [
            [
                n,
                msgspec.structs.replace(
                    r, metadata=msgspec.structs.replace(r.metadata, config_path=[], spec_path=None)
                ),
            ]
            for n, r in requests
        ],
    }
    return hashlib.sha256(canonical_json(body)).hexdigest()[:12]


def resolve_orchestration(
    spec: SourceDoc,
    configs: Sequence[ConfigDoc],
    *,
    task_concurrency: int | None = None,
    execution_params: Mapping[str, Any] | None = None,
    runtime_params: Mapping[str, Any] | None = None,
    environ: Mapping[str, str],
    cli_sections: Mapping[str, str] | None = None,
    environment: str | None = None,
) -> Compiled:
    """Resolve a validated orchestration SourceDoc against validated config docs (pure).

    ``cli_sections`` marks ``spec`` as synthesised from explicit arguments (single run, R8):
    its request sections are recorded as command-line contributions named by these flags.
    """
    resolver = _Resolver(
        spec,
        configs,
        task_concurrency=task_concurrency,
        execution_params=execution_params,
        runtime_params=runtime_params,
        environ=environ,
        cli_sections=cli_sections,
        environment=environment,
    )
    return resolver.resolve()


def config_view(
    configs: Sequence[ConfigDoc], *, components: Mapping[str, Sequence[str]]
) -> tuple[dict[str, Any], dict[str, list[Contribution]]]:
    """The merged effective run config (``acx config show``) and its provenance.

    ``runtime`` and ``execution`` are shown over their defaults; ``components`` selects which
    ids of ``benchmarks``/``harnesses``/``environments`` to show (over the component's
    defaults). Values are shown as written: ``${VAR}`` references are not substituted.
    """
    from acx.compiler._shapes import ConfigRuntimeOptions
    from acx.components import registry

    view: dict[str, Any] = {}
    prov: dict[str, list[Contribution]] = {}

    def merged(section: Path_, defaults: dict[str, Any], label: str, drop_on_null: bool = False) -> None:
        merger = _Merger(lambda rel: (*section, *rel), lambda p: p[-1] in NETWORK_POLICY_FIELDS)
        merger.add(_Frag("default", "default", defaults, flag=label))
        for cfg in configs:
            value: Any = cfg.doc.data
            for part in section:
                value = value.get(part) if isinstance(value, dict) else None
            if value is None and drop_on_null and _present(cfg.doc.data, section):
                merger = _Merger(merger.prefix, merger.atomic)
                merger.add(_Frag("default", "default", defaults, flag=label))
            elif isinstance(value, dict):
                merger.add(_Frag(cfg.layer, "file", value, doc=cfg.doc, base=section))
        target = view
        for part in section[:-1]:
            target = target.setdefault(str(part), {})
        target[str(section[-1])] = merger.data
        prov.update(_chains(merger, merger.data, section))

    merged(("runtime",), field_defaults(ConfigRuntimeOptions), "runtime default")
    merged(("execution",), field_defaults(ExecutionSpec), "ExecutionSpec default")
    for kind, table in (
        ("benchmark", "benchmarks"),
        ("harness", "harnesses"),
        ("environment", "environments"),
    ):
        for cid in components.get(kind, ()):
            info = registry(kind)[cid]
            defaults = field_defaults(info.config_class)
            if kind == "environment":
                shared = field_defaults(EnvironmentSpec)
                defaults = {**{k: v for k, v in shared.items() if k in ENVIRONMENT_SPEC_FIELDS}, **defaults}
            merged((table, cid), defaults, f"{cid} default", drop_on_null=True)
    return view, prov


def _present(data: Any, section: Path_) -> bool:
    for part in section[:-1]:
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
        if data is None:
            return True  # `environments: null` drops every provider
    return isinstance(data, dict) and section[-1] in data
