"""AgentCompass benchmark ids as presets (see ``_preset_table`` for the list and docs/datasets.md).

- QA presets (``hle``, ``sealqa``, ``browsecomp``, ``xbench_deepsearch``, ``gaia``, …) are the
  ``dataset`` benchmark with the published data layout as the default field mapping and the
  benchmark's scorer as the default ``scorers``; the data is a local copy at ``path`` (default
  ``data/<id>``, a file or a directory holding one data file).
- Harbor presets (``terminal_bench_2``, ``swebench_verified``, …) are the ``harbor`` benchmark
  with ``path`` defaulting to ``data/<id>``, the benchmark's default evaluation mode (a task's own
  ``verifier.environment_mode`` still wins, P5) and, for ``swebench_pro_verified``, a run-phase
  denylist for tasks that declare no run policy.

Every default is an ordinary config default: visible in ``acx config docs``, the dry run and
``explain``, and overridable like any param. Config and benchmark classes are generated from the
table so an id, its config class and its implementation cannot drift apart.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import types
import typing
from pathlib import Path
from typing import Annotated, Any, ClassVar

import msgspec

from acx.components._configs import DatasetConfig, FieldMapping, HarborConfig
from acx.components.benchmarks._preset_table import HARBOR_PRESETS, HARBOR_RUN_DENYLIST, QA_PRESETS
from acx.components.benchmarks.dataset import DatasetBenchmark
from acx.components.benchmarks.harbor import HarborBenchmark
from acx.components.datasets import load_dataset
from acx.components.scorers._model_graded import GraderModel
from acx.errors import AcxPlanError
from acx.ir import NetworkPolicy, RunRequest, TaskSpec

__all__ = ["config_class_name", "decrypt_canary", "impl_class_name"]


def _camel(pid: str) -> str:
    return "".join(part.capitalize() for part in pid.split("_"))


def config_class_name(pid: str) -> str:
    return f"{_camel(pid)}PresetConfig"


def impl_class_name(pid: str) -> str:
    return f"{_camel(pid)}PresetBenchmark"


# ---- row transforms --------------------------------------------------------------------------


def _xor_key(password: str, length: int) -> bytes:
    key = hashlib.sha256(password.encode()).digest()
    return key * (length // len(key)) + key[: length % len(key)]


def decrypt_canary(ciphertext_b64: str, password: str) -> str:
    """BrowseComp's row encryption: base64 of the text XOR-ed with SHA-256(canary), repeated."""
    data = base64.b64decode(ciphertext_b64, validate=True)
    return bytes(a ^ b for a, b in zip(data, _xor_key(password, len(data)), strict=True)).decode("utf-8")


def _decrypting(columns: tuple[str, ...]) -> Any:
    def transform(record: dict[str, Any], loc: Any) -> dict[str, Any]:
        canary = record.get("canary")
        if not canary or not isinstance(canary, str):
            return record  # a plain-text copy
        out = dict(record)
        for col in columns:
            value = record.get(col)
            if isinstance(value, str) and value:
                try:
                    out[col] = decrypt_canary(value, canary)
                except (ValueError, UnicodeDecodeError):
                    raise loc.error(
                        f"column `{col}` cannot be decrypted with the row's canary",
                        "the preset expects the published encrypted file (or plain text with no `canary` column)",
                        field=col,
                    ) from None
        return out

    return transform


def _gaia_files(record: dict[str, Any], loc: Any) -> dict[str, Any]:
    name = record.get("file_name")
    if not name:
        return record
    # The attachment sits beside metadata.jsonl; the agent finds it under the same name.
    return {**record, "_files": {Path(str(name)).name: str(name)}}


_HLE = {
    "fields": FieldMapping(id="id", input="question", target="answer", category="category"),
    "filters": {"image": [None, ""]},  # text-only: acx's harnesses take no image input
    "scorers": [{"id": "model_graded", "template": "hle"}],
}
_QA_DEFAULTS: dict[str, dict[str, Any]] = {
    "hle": _HLE,
    "hle_verified": _HLE,
    "sealqa": {
        "fields": FieldMapping(id=None, input="question", target="answer"),
        "scorers": [{"id": "model_graded", "template": "simpleqa"}],
    },
    "browsecomp": {
        "fields": FieldMapping(id=None, input="problem", target="answer", category="problem_topic"),
        "scorers": [{"id": "model_graded", "template": "browsecomp"}],
        "transform": _decrypting(("problem", "answer", "problem_topic")),
    },
    "browsecomp_zh": {
        "fields": FieldMapping(id=None, input="Question", target="Answer", category="Topic"),
        "scorers": [{"id": "model_graded", "template": "browsecomp"}],
        "transform": _decrypting(("Question", "Answer", "Topic")),
    },
    "xbench_deepsearch": {
        "fields": FieldMapping(id="id", input="prompt", target="answer"),
        "scorers": [{"id": "model_graded", "template": "xbench"}],
        "transform": _decrypting(("prompt", "answer")),
    },
    "gaia": {
        "fields": FieldMapping(id="task_id", input="Question", target="Final answer", category="Level", files="_files"),
        "scorers": ["gaia"],
        "transform": _gaia_files,
    },
}


# ---- class generation ------------------------------------------------------------------------


def _copier(value: Any) -> Any:
    def make() -> Any:
        return copy.deepcopy(value)

    return make


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


#: AgentCompass's QA benchmarks take their judge as `judge_model`; the presets accept it too.
_JUDGE_MODEL = Annotated[
    GraderModel | None,
    msgspec.Meta(
        description="AgentCompass-compatible: the grader of the preset's model_graded scorers "
        "(default: the run's `grader` role, else its model)"
    ),
]


def _config(base: type, name: str, defaults: dict[str, Any], extra: dict[str, Any] | None = None) -> type:
    hints = _hints(base)

    def body(ns: dict[str, Any]) -> None:
        ns["__module__"] = __name__
        ns["__annotations__"] = {k: hints[k] for k in defaults} | {k: t for k, (t, _) in (extra or {}).items()}
        for key, (_, default) in (extra or {}).items():
            ns[key] = default
        for key, value in defaults.items():
            ns[key] = msgspec.field(default_factory=_copier(value)) if isinstance(value, dict | list) else value

    return types.new_class(name, (base,), {"frozen": True, "kw_only": True}, body)


class _QAPreset(DatasetBenchmark):
    preset_defaults: ClassVar[dict[str, Any]] = {}
    data_source: ClassVar[str] = ""

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        d = self.preset_defaults
        return load_dataset(
            self.config,
            self.base_dir,
            benchmark=self.id,
            transform=d.get("transform"),
            # The preset's own text-only filter may name a column a copy does not have.
            lenient_filters=self.config.filters == d.get("filters"),
            missing_help=f"the `{self.id}` preset reads a local copy of {self.data_source}: put it at "
            f"`{self.config.path}` (a file, or a directory holding one) or set `path`",
        )

    def default_scorers(self) -> list[Any]:
        return list(self.preset_defaults["scorers"])

    def scorer_entries(self) -> list[Any]:
        """The scorers, with ``judge_model`` given to every model_graded entry without a model
        (for GAIA, whose scorer is not a model, the judge becomes a second metric ``judge``)."""
        entries = super().scorer_entries()
        judge = getattr(self.config, "judge_model", None)
        if judge is None:
            return entries
        model = msgspec.to_builtins(judge)
        out: list[Any] = []
        graded = False
        for entry in entries:
            item = {"id": entry} if isinstance(entry, str) else dict(entry)
            if item.get("id") == "model_graded":
                graded = True
                item.setdefault("model", model)
            out.append(item)
        if not graded:
            out.append({"id": "model_graded", "name": "judge", "model": model})
        return out


class _HarborPreset(HarborBenchmark):
    data_source: ClassVar[str] = ""
    run_denylist: ClassVar[list[str] | None] = None

    def load_tasks(self, req: RunRequest) -> list[TaskSpec]:
        path = self.tasks_path()
        if not path.exists():
            raise AcxPlanError(
                f"`{self.id}` task directory {path} does not exist",
                code="E0410",
                path="benchmark.params.path",
                help=f"the `{self.id}` preset runs {self.data_source} from disk: put them at "
                f"`{self.config.path}` (one sub-directory per task) or set `path`",
            )
        tasks = super().load_tasks(req)
        if self.run_denylist:
            policy = NetworkPolicy(network_mode="denylist", denied_hosts=list(self.run_denylist))
            # Only where the agent phase would otherwise be public: a task whose environment is
            # no-network or an allowlist keeps that baseline for its agent (never opened up).
            tasks = [
                msgspec.structs.replace(t, run_network_policy=policy)
                if t.run_network_policy is None
                and (t.baseline_network_policy is None or t.baseline_network_policy.network_mode == "public")
                else t
                for t in tasks
            ]
        return tasks


def _build() -> None:
    g = globals()
    for pid, (description, source) in QA_PRESETS.items():
        d = _QA_DEFAULTS[pid]
        cfg = _config(
            DatasetConfig,
            config_class_name(pid),
            {
                "path": f"data/{pid}",
                "fields": d["fields"],
                **({"filters": d["filters"]} if "filters" in d else {}),
                "scorers": d["scorers"],
            },
            {"judge_model": (_JUDGE_MODEL, None)},
        )
        g[cfg.__name__] = cfg
        g[impl_class_name(pid)] = type(
            impl_class_name(pid),
            (_QAPreset,),
            {
                "id": pid,
                "description": description,
                "config_class": cfg,
                "preset_defaults": d,
                "data_source": source,
                "__module__": __name__,
            },
        )
    for pid, (description, mode, source) in HARBOR_PRESETS.items():
        cfg = _config(HarborConfig, config_class_name(pid), {"path": f"data/{pid}"})
        g[cfg.__name__] = cfg
        g[impl_class_name(pid)] = type(
            impl_class_name(pid),
            (_HarborPreset,),
            {
                "id": pid,
                "description": description,
                "config_class": cfg,
                "evaluation_environment_mode": mode,
                "data_source": source,
                "run_denylist": HARBOR_RUN_DENYLIST.get(pid),
                "__module__": __name__,
            },
        )


_build()
