"""AgentCompass benchmark ids as data: which acx can run as presets, and why the others cannot.

Cheap to import (no acx import): the registry registers every preset id from here and the
validator names the missing piece for a refused id (E0309).
"""

from __future__ import annotations

__all__ = ["HARBOR_PRESETS", "HARBOR_RUN_DENYLIST", "QA_PRESETS", "UNSUPPORTED"]

#: QA presets over ``dataset``: id → (description, where the data comes from).
QA_PRESETS: dict[str, tuple[str, str]] = {
    "hle": (
        "Humanity's Last Exam (text-only questions) over a local copy, graded by a model with HLE's judge rubric.",
        "Hugging Face `cais/hle` (test split) exported to Parquet, JSONL or CSV",
    ),
    "hle_verified": (
        "HLE-Verified (text-only questions) over a local copy, graded by a model with HLE's judge rubric.",
        "the HLE-Verified export (same columns as `cais/hle`)",
    ),
    "sealqa": (
        "SealQA over a local copy, graded by a model with the SimpleQA rubric (ids are content hashes).",
        "Hugging Face `vtllms/sealqa` exported to Parquet, JSONL or CSV",
    ),
    "browsecomp": (
        "BrowseComp over a local copy of its CSV (rows decrypted with their canary), model-graded.",
        "`browse_comp_test_set.csv` (columns problem, answer, problem_topic, canary)",
    ),
    "browsecomp_zh": (
        "BrowseComp-ZH over a local copy (rows with a canary decrypted), model-graded.",
        "the BrowseComp-ZH CSV/JSONL (columns Question, Answer, Topic[, canary])",
    ),
    "xbench_deepsearch": (
        "xbench-DeepSearch over a local copy, graded by a model with its Chinese judge rubric.",
        "the xbench-DeepSearch CSV/JSONL (columns id, prompt, answer[, canary])",
    ),
    "gaia": (
        "GAIA questions over a local copy (attachments placed in the sandbox), scored by GAIA's scorer.",
        "GAIA `metadata.jsonl` with its attachment files beside it (Hugging Face `gaia-benchmark/GAIA`)",
    ),
}

#: Harbor-shaped presets over ``harbor``: id → (description, default evaluation mode, data).
HARBOR_PRESETS: dict[str, tuple[str, str, str]] = {
    "terminal_bench_2": ("Terminal-Bench 2.0 Harbor task directories.", "reuse", "Terminal-Bench 2.0 task directories"),
    "terminal_bench_2_1": (
        "Terminal-Bench 2.1 Harbor task directories.",
        "reuse",
        "Terminal-Bench 2.1 task directories",
    ),
    "terminal_bench_2_verified": (
        "Terminal-Bench 2 (verified subset) Harbor task directories.",
        "reuse",
        "the verified Terminal-Bench 2 task directories",
    ),
    "swebench_verified": (
        "SWE-bench Verified as Harbor task directories, verified in a fresh environment.",
        "fresh",
        "SWE-bench Verified converted to Harbor task directories",
    ),
    "swebench_multilingual": (
        "SWE-bench Multilingual as Harbor task directories, verified in a fresh environment.",
        "fresh",
        "SWE-bench Multilingual converted to Harbor task directories",
    ),
    "swebench_pro": (
        "SWE-bench Pro as Harbor task directories, verified in a fresh environment.",
        "fresh",
        "SWE-bench Pro converted to Harbor task directories",
    ),
    "swebench_pro_verified": (
        "SWE-bench Pro (verified) as Harbor task directories; the agent may not reach code/model hosting sites.",
        "fresh",
        "SWE-bench Pro (verified) converted to Harbor task directories",
    ),
    "skillsbench": ("SkillsBench Harbor task directories.", "reuse", "SkillsBench task directories"),
}

#: The run-phase policy a preset gives tasks that declare none (AgentCompass: swebench_pro_verified
#: denies code and model hosting sites so the agent cannot look up the fix).
HARBOR_RUN_DENYLIST: dict[str, list[str]] = {
    "swebench_pro_verified": [
        "github.com",
        "*.github.com",
        "*.githubusercontent.com",
        "gitlab.com",
        "bitbucket.org",
        "huggingface.co",
        "*.huggingface.co",
        "hf.co",
        "modelscope.cn",
    ],
}

#: AgentCompass ids acx cannot honour: id → what is missing (one sentence, shown to users).
UNSUPPORTED: dict[str, str] = {
    "osworld": "it needs a desktop virtual machine (screenshots, mouse and keyboard actions) and a "
    "harness-free GUI runner; acx has neither a VM driver nor a GUI harness",
    "taubench": "it is a harness-free benchmark with a simulated user and tau2's tool APIs (the `tau2` "
    "package); acx has no user simulator",
    "screenspot": "it grades GUI grounding on screenshots (image input and click coordinates); acx's "
    "harnesses take text only",
    "widesearch": "it grades table-shaped answers with its own evaluator (column matching and LLM checks), "
    "which acx does not implement",
    "deepresearch_bench": "it grades long research reports with the RACE/FACT rubric pipeline and "
    "reference reports, which acx does not implement",
    "sgi_deep_research": "it grades research reports with its own rubric pipeline, which acx does not implement",
    "deepsearchqa": "acx has no preset for its data layout and scoring yet; use `dataset` with a field "
    "mapping and a `model_graded` scorer",
    "frontierscience": "acx has no preset for its data layout and rubric scoring yet; use `dataset` with a "
    "field mapping and a `model_graded` scorer",
    "scicode": "it runs generated code against the benchmark's own test data and evaluator (the `scicode` "
    "extra), which acx does not ship",
    "gdpval_ac": "it grades office-document deliverables with its own rubric evaluator, which acx does not implement",
    "brainarena": "its task format and evaluator are AgentCompass-specific and not implemented in acx",
    "special_pattern_check": "its task format and evaluator are AgentCompass-specific and not implemented in acx",
    "deepswe": "acx does not know its task format; if you have it as Harbor task directories, use `harbor` with `path`",
    "frontier_swe": "acx does not know its task format; if you have it as Harbor task directories, use "
    "`harbor` with `path`",
    "frontier_engineering": "acx does not know its task format; if you have it as Harbor task directories, "
    "use `harbor` with `path`",
    "swe_marathon": "acx does not know its task format; if you have it as Harbor task directories, use "
    "`harbor` with `path`",
    "pinchbench": "acx does not know its task format; if you have it as Harbor task directories, use "
    "`harbor` with `path`",
    "researchclawbench": "acx does not know its task format; if you have it as Harbor task directories, use "
    "`harbor` with `path`",
    "wildclawbench": "acx does not know its task format; if you have it as Harbor task directories, use "
    "`harbor` with `path`",
}
