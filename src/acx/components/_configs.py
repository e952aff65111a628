"""Typed config classes of the built-in components (B2): closed records with described fields.

These are what users write under ``benchmarks.<id>`` / ``harnesses.<id>`` and in request
``benchmark``/``harness`` sections. They are the single source for validation, JSON Schema and
``acx config docs``. Cheap to import: msgspec only.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec

__all__ = [
    "AnswerFromFile",
    "AnswerFromJsonl",
    "AnswerFromStdout",
    "AnswerSpec",
    "BenchmarkConfig",
    "CommandHarnessConfig",
    "DatasetConfig",
    "ExactMatchConfig",
    "FieldMapping",
    "HarborConfig",
    "HarnessConfig",
    "McpServerConfig",
    "TerminusConfig",
]


def _d(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


class ComponentConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of component configs."""


SampleIds = str | int | list[str | int] | None


class BenchmarkConfig(ComponentConfig, frozen=True):
    """Params every benchmark accepts."""

    sample_ids: Annotated[SampleIds, _d("only these task ids (unknown ids are an error)")] = None
    aggregation_mode: Annotated[Literal["micro_weighted", "category_mean"], _d("how per-task scores are combined")] = (
        "micro_weighted"
    )
    category_hierarchy: Annotated[
        dict[str, list[str]] | None, _d("parent category → child categories; not supported by acx (E0311)")
    ] = None


class ExactMatchConfig(BenchmarkConfig, frozen=True, kw_only=True):
    dataset: Annotated[str, _d("JSONL file with `id`, `question`, `answer` [, `category`]; relative to the spec file")]
    case_sensitive: Annotated[bool, _d("compare answers case-sensitively")] = False
    normalize_whitespace: Annotated[bool, _d("collapse runs of whitespace and strip both ends")] = True
    strip_punctuation: Annotated[bool, _d("ignore trailing punctuation such as `.` or `!`")] = False
    n_tasks: Annotated[Annotated[int, msgspec.Meta(ge=1)] | None, _d("first N tasks after selection")] = None
    system_prompt: Annotated[str | None, _d("system prompt given to the harness")] = None


class FieldMapping(ComponentConfig, frozen=True):
    """Which column of a dataset row is which part of a task (``dataset`` benchmark)."""

    id: Annotated[
        str | None,
        _d("column with the task id (string or integer); null: ids are content hashes of input/target/choices"),
    ] = "id"
    input: Annotated[str, _d("column with the prompt: text, or a list of chat messages {role, content}")] = "input"
    target: Annotated[str | None, _d("column with the answer: one value or a list of acceptable ones")] = "target"
    choices: Annotated[
        str | list[str] | None,
        _d("multiple choice: one column holding a list, or several columns (one choice each, in order)"),
    ] = None
    category: Annotated[str | None, _d("column with the category (default: every task is `all`)")] = None
    metadata: Annotated[
        list[str] | None, _d("columns kept as task metadata (default: every column not mapped above)")
    ] = None
    files: Annotated[
        str | None,
        _d(
            "column with files to place in the sandbox: {sandbox path: host path relative to the dataset "
            "file, or a data: URI}"
        ),
    ] = None
    system_prompt: Annotated[str | None, _d("column with a per-task system prompt")] = None


ScalarValue = str | int | float | bool | None


class DatasetConfig(BenchmarkConfig, frozen=True, kw_only=True):
    path: Annotated[
        str,
        _d(
            "dataset file (JSONL, JSON, CSV, TSV, Parquet, Arrow) or a folder holding one or a Hugging "
            "Face save_to_disk folder; relative to the spec file"
        ),
    ]
    format: Annotated[
        Literal["auto", "jsonl", "json", "csv", "tsv", "parquet", "arrow"],
        _d("file format; auto: from the suffix (.jsonl .ndjson .json .csv .tsv .parquet .arrow)"),
    ] = "auto"
    fields: Annotated[FieldMapping, _d("column → task field mapping")] = FieldMapping()
    filters: Annotated[
        dict[str, ScalarValue | list[ScalarValue]] | None,
        _d("keep rows whose column equals the value (or one of the listed values); null matches a missing value"),
    ] = None
    shuffle: Annotated[bool, _d("shuffle the selected tasks (deterministic with `seed`) before `limit`")] = False
    seed: Annotated[int, _d("seed of task and choice shuffling")] = 0
    limit: Annotated[
        Annotated[int, msgspec.Meta(ge=1)] | None, _d("first N tasks after filters/sample_ids/shuffle")
    ] = None
    shuffle_choices: Annotated[bool, _d("shuffle each task's choices per attempt (recorded with the attempt)")] = False
    scorers: Annotated[
        list[str | dict[str, Any]] | None,
        _d(
            "scorer ids or {id, name, reducers, ...params}; the first is the primary metric "
            "(default: exact, or choice for multiple choice)"
        ),
    ] = None
    prompt_template: Annotated[
        str | None,
        _d("prompt with {input} (and {choices} for multiple choice); default: the input as is / a lettered list"),
    ] = None
    system_prompt: Annotated[str | None, _d("system prompt given to the harness")] = None

    def __post_init__(self) -> None:
        # Refused rather than silently ignored (B2): without {input} the question never reaches the
        # agent; the multiple-choice options only act when `fields.choices` is mapped.
        template = self.prompt_template
        if template is not None and "{input}" not in template:
            raise ValueError("prompt_template must contain {input} (where the task's input goes)")
        if self.fields.choices is None:
            if self.shuffle_choices:
                raise ValueError("shuffle_choices needs multiple choice: map the choices column with fields.choices")
            if template is not None and ("{choices}" in template or "{letters}" in template):
                raise ValueError(
                    "prompt_template uses {choices}/{letters}, which need multiple choice: map fields.choices"
                )
            if any((s.get("id") if isinstance(s, dict) else s) == "choice" for s in self.scorers or ()):
                # Every task would end in a scorer_target_invalid evaluation error: say it at planning.
                raise ValueError("scorer `choice` needs multiple choice: map the choices column with fields.choices")


class HarborConfig(BenchmarkConfig, frozen=True, kw_only=True):
    path: Annotated[str, _d("a Harbor task directory or a directory of them; relative to the spec file")]
    task_names: Annotated[list[str] | None, _d("glob patterns over task names")] = None
    n_tasks: Annotated[Annotated[int, msgspec.Meta(ge=1)] | None, _d("first N tasks after selection")] = None
    solution_env_for_agent: Annotated[bool, _d("pass [solution].env to the agent (H6)")] = False


class HarnessConfig(ComponentConfig, frozen=True):
    """Params every harness accepts."""

    inject_network_restriction_notice: Annotated[
        bool, _d("append a network-restriction notice to the prompt when egress is restricted")
    ] = True


class CommandHarnessConfig(HarnessConfig, frozen=True, kw_only=True):
    """Runs a configured command as the agent."""

    command: Annotated[str | list[str], _d("the agent command: argv list, or a string run with bash -c")]
    prompt_file: Annotated[
        str | None, _d("where the prompt is written in the sandbox (also passed on stdin); relative to cwd")
    ] = "prompt.txt"
    answer_file: Annotated[str | None, _d("read the answer from this file instead of stdout; relative to cwd")] = None
    cwd: Annotated[str | None, _d("working directory; default the environment workdir")] = None
    strip_output: Annotated[bool, _d("strip surrounding whitespace from the answer")] = True


McpTransport = Literal["stdio", "sse", "streamable-http"]

#: A server name: it prefixes its tools' names (``<server>__<tool>``), so it is kept short and plain.
MCP_SERVER_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"


class McpServerConfig(ComponentConfig, frozen=True, kw_only=True):
    """One MCP server whose tools the agent gets (docs/agents.md, "MCP servers")."""

    name: Annotated[
        str, msgspec.Meta(pattern=MCP_SERVER_NAME, description="server name; its tools are offered as <name>__<tool>")
    ]
    transport: Annotated[
        McpTransport | None,
        _d(
            "stdio (a command run inside the sandbox), streamable-http or sse (a URL); default: stdio with a "
            "command, streamable-http with a url"
        ),
    ] = None
    command: Annotated[str | None, _d("stdio: the server's executable inside the sandbox")] = None
    args: Annotated[list[str], _d("stdio: its arguments")] = []
    url: Annotated[str | None, _d("streamable-http / sse: the server's endpoint, as the host reaches it")] = None
    env: Annotated[dict[str, str], _d("stdio: variables set for the server process")] = {}
    headers: Annotated[dict[str, str], _d("streamable-http / sse: HTTP headers sent with every request")] = {}
    timeout_seconds: Annotated[
        float, msgspec.Meta(gt=0, le=86400, description="budget of one tool call (clipped to the run budget left)")
    ] = 60.0

    def __post_init__(self) -> None:
        problem = mcp_server_problem(
            self.transport,
            self.command,
            self.url,
            has_args=bool(self.args),
            has_env=bool(self.env),
            has_headers=bool(self.headers),
        )
        if problem is not None:
            raise ValueError(problem)

    @property
    def resolved_transport(self) -> str:
        return self.transport or ("stdio" if self.command is not None else "streamable-http")


def mcp_server_problem(
    transport: str | None,
    command: str | None,
    url: str | None,
    *,
    has_args: bool = False,
    has_env: bool = False,
    has_headers: bool = False,
) -> str | None:
    """Why a server declaration is inconsistent (None when it is fine); shared with Harbor's mapping.
    A field the transport does not use is refused, never ignored."""
    kind = transport or ("stdio" if command is not None else "streamable-http" if url is not None else None)
    if kind is None:
        return "an MCP server needs a command (stdio) or a url (streamable-http / sse)"
    if kind == "stdio":
        if not command:
            return "a stdio MCP server needs a command (run inside the sandbox)"
        if url is not None or has_headers:
            return "a stdio MCP server takes a command (args, env), not a url or headers"
        return None
    if not url:
        return f"a {kind} MCP server needs a url"
    if command is not None or has_args or has_env:
        return f"a {kind} MCP server takes a url (and headers), not a command, args or env"
    if not re.match(r"^https?://[^/\s]+", url):
        return f"the url of a {kind} MCP server must start with http:// or https:// (got {url!r})"
    return None


def mcp_names_problem(names: list[str]) -> str | None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return f"two MCP servers are named {name!r}; names must be unique (they prefix the tools)"
        seen.add(name)
    return None


ReactTool = Literal["bash", "python", "edit", "submit"]


class ReactConfig(HarnessConfig, frozen=True, kw_only=True):
    """The built-in tool-calling agent loop (docs/agents.md)."""

    system_prompt: Annotated[
        str | None, _d("system message; default: acx's agent prompt (the task's own system prompt is appended)")
    ] = None
    prompt_template: Annotated[
        str | None,
        _d(
            "first user message, with {prompt} where the task's prompt goes; default: a template for the "
            "kind of task (answer by submit, or leave the solution in the sandbox)"
        ),
    ] = None
    answer: Annotated[
        Literal["auto", "submit", "sandbox"],
        _d(
            "how the task is answered: submit(answer) is the answer (QA), or the sandbox state is (judged by a "
            "verifier; submit only ends the episode); auto: sandbox when the task is evaluated on its sandbox"
        ),
    ] = "auto"
    tools: Annotated[
        list[ReactTool], _d("tools the model gets: bash, python, edit (view/create/str_replace/insert), submit")
    ] = msgspec.field(default_factory=lambda: ["bash", "python", "edit", "submit"])
    max_turns: Annotated[int, msgspec.Meta(ge=1, le=10000, description="model calls before the loop stops")] = 50
    command_timeout_seconds: Annotated[
        float, msgspec.Meta(gt=0, description="budget of one bash/python call (clipped to the run budget left)")
    ] = 180.0
    max_observation_chars: Annotated[
        int, msgspec.Meta(ge=200, description="longer tool output keeps its head and tail, the rest elided")
    ] = 16000
    max_format_errors: Annotated[
        int, msgspec.Meta(ge=0, description="malformed tool calls answered with a correction before giving up")
    ] = 3
    parallel_tool_calls: Annotated[bool, _d("run several tool calls of one turn concurrently")] = True
    cwd: Annotated[str | None, _d("working directory of the tools; default the environment workdir")] = None
    python: Annotated[str, _d("python interpreter inside the sandbox")] = "python3"
    mcp_servers: Annotated[
        list[McpServerConfig],
        _d("MCP servers whose tools the agent also gets (a Harbor task's own mcp_servers are added)"),
    ] = []

    def __post_init__(self) -> None:
        problem = mcp_names_problem([s.name for s in self.mcp_servers])
        if problem is not None:
            raise ValueError(problem)
        if self.prompt_template is not None and "{prompt}" not in self.prompt_template:
            raise ValueError("prompt_template must contain {prompt} (where the task's prompt goes)")
        if "submit" not in self.tools and self.answer == "submit":
            raise ValueError("answer = submit needs the submit tool in tools")
        if not self.tools:
            raise ValueError("tools must name at least one tool")


#: A value a ``where`` condition compares a JSON field with.
JsonScalar = str | int | float | bool | None


class AnswerFromStdout(ComponentConfig, frozen=True, kw_only=True, tag_field="from", tag="stdout"):
    """The answer from the agent's stdout (docs/agents.md, "The answer")."""

    pick: Annotated[Literal["all", "last_line"], _d("all: the whole stdout; last_line: its last non-blank line")] = (
        "all"
    )
    regex: Annotated[
        str | None,
        _d(
            "a Python regular expression searched in the picked text; the answer is its last match: the group "
            "named `answer`, else group 1, else the whole match"
        ),
    ] = None


class AnswerFromFile(ComponentConfig, frozen=True, kw_only=True, tag_field="from", tag="file"):
    """The answer from a file the agent wrote (docs/agents.md, "The answer")."""

    path: Annotated[str, _d("the sandbox file; relative paths start at the command's cwd")]
    json_path: Annotated[
        str | None,
        _d("the file is JSON and the answer is this field: dotted keys, integers index lists (`info.submission`)"),
    ] = None
    where: Annotated[
        dict[str, JsonScalar],
        _d("with json_path: fields (dotted paths) the document must have, with these values, to hold an answer"),
    ] = {}
    regex: Annotated[
        str | None,
        _d(
            "the file read as text, the answer is the last match of this Python regular expression: the group "
            "named `answer`, else group 1, else the whole match (not with json_path)"
        ),
    ] = None


class AnswerFromJsonl(ComponentConfig, frozen=True, kw_only=True, tag_field="from", tag="jsonl"):
    """The answer from one event of a JSON Lines log (docs/agents.md, "The answer")."""

    path: Annotated[
        str | None, _d("the sandbox JSONL file (relative to the command's cwd); unset: the agent's stdout")
    ] = None
    where: Annotated[
        dict[str, JsonScalar], _d("the events considered: those whose fields (dotted paths) have these values")
    ] = {}
    field: Annotated[
        str | list[str],
        _d("the answer: this field (dotted path) of the picked event; a list: the first of them the event has"),
    ]
    pick: Annotated[Literal["last", "first"], _d("which of the matching events")] = "last"


AnswerSpec = AnswerFromStdout | AnswerFromFile | AnswerFromJsonl


class InstalledAgentConfig(HarnessConfig, frozen=True, kw_only=True):
    """An agent installed and run inside the sandbox (see docs/agents.md, "Installed agents")."""

    agent: Annotated[
        str | None,
        _d(
            "shipped definition (install/command/logs defaults): mini-swe-agent, claude-code, codex, opencode, "
            "aider, openhands"
        ),
    ] = None
    upload: Annotated[
        list[str], _d("files or directories to upload into agent_dir, relative to the spec file's directory")
    ] = []
    agent_dir: Annotated[str, _d("absolute sandbox directory the uploads land in (ACX_AGENT_DIR)")] = "/installed-agent"
    install: Annotated[
        str | list[str] | None, _d("install command (bash -c for a string), run in agent_dir in phase install_agent")
    ] = None
    install_timeout_seconds: Annotated[float, msgspec.Meta(gt=0, description="budget of the install_agent phase")] = (
        600.0
    )
    install_cache: Annotated[
        bool | None,
        _d(
            "install once per base image x install (a derived image every attempt starts from) instead of in "
            "every attempt: unset = where the driver can (docker), true = required (refused elsewhere, E0459), "
            "false = install in every attempt"
        ),
    ] = None
    command: Annotated[str | list[str] | None, _d("the agent's run command (bash -c for a string)")] = None
    model_env_aliases: Annotated[
        dict[str, str], _d("NAME = GATEWAY_VAR: also export a gateway variable under the name the agent reads")
    ] = {}
    logs: Annotated[list[str], _d("sandbox files or directories of the agent's logs, collected after the run")] = []
    max_log_bytes: Annotated[int, msgspec.Meta(ge=1, description="bytes kept per collected log file (the tail)")] = (
        65536
    )
    prompt_file: Annotated[
        str | None, _d("where the prompt is written in the sandbox (also passed on stdin); relative to cwd")
    ] = "prompt.txt"
    answer_file: Annotated[str | None, _d("read the answer from this file instead of stdout; relative to cwd")] = None
    answer: Annotated[
        AnswerSpec | None,
        _d(
            "where the answer is: {from: stdout, pick, regex}, {from: file, path, json_path, where} or "
            "{from: jsonl, path, where, field, pick}; default the definition's, else the whole stdout"
        ),
    ] = None
    cwd: Annotated[str | None, _d("working directory of the run command; default the environment workdir")] = None
    strip_output: Annotated[bool, _d("strip surrounding whitespace from the answer")] = True
    mcp_servers: Annotated[
        list[McpServerConfig],
        _d(
            "MCP servers given to the agent in its own config format (claude-code, codex; a custom command gets "
            "$ACX_MCP_CONFIG); a Harbor task's own mcp_servers are added"
        ),
    ] = []

    def __post_init__(self) -> None:
        problem = mcp_names_problem([s.name for s in self.mcp_servers])
        if problem is not None:
            raise ValueError(problem)


class TerminusConfig(HarnessConfig, frozen=True, kw_only=True):
    """Terminus 2, Harbor's reference terminal agent (docs/agents.md, "Terminus 2")."""

    max_turns: Annotated[int, msgspec.Meta(ge=1, le=100000, description="model calls before the loop stops")] = 1000
    pane_width: Annotated[int, msgspec.Meta(ge=20, le=1000, description="tmux terminal width (columns)")] = 160
    pane_height: Annotated[int, msgspec.Meta(ge=5, le=1000, description="tmux terminal height (rows)")] = 40
    history_limit: Annotated[
        int, msgspec.Meta(ge=1000, description="tmux scrollback lines (new output is found by comparing it)")
    ] = 10_000_000
    max_output_bytes: Annotated[
        int, msgspec.Meta(ge=200, description="longer terminal output keeps its head and tail, the rest elided")
    ] = 10000
    max_log_bytes: Annotated[
        int, msgspec.Meta(ge=1, description="bytes of the final terminal scrollback kept in agent_logs")
    ] = 65536
    cwd: Annotated[str | None, _d("directory the terminal starts in; default the environment workdir")] = None
    summarize: Annotated[
        bool,
        _d(
            "summarize the conversation and continue in a fresh one when the model's context overflows "
            "(or proactive_summarization_threshold is reached); false: a context overflow ends the attempt"
        ),
    ] = True
    context_limit: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="the model's context window in tokens (acx does not look it up: set your model's)",
        ),
    ] = 256000
    proactive_summarization_threshold: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="summarize before a turn when context_limit minus the tokens in use is below this; 0: "
            "only when the model reports the context exceeded",
        ),
    ] = 8000

    def __post_init__(self) -> None:
        # Refused rather than silently ignored (B2): both only act when summarizing.
        if not self.summarize:
            inert = [
                name
                for name, default in (("context_limit", 256000), ("proactive_summarization_threshold", 8000))
                if getattr(self, name) != default
            ]
            if inert:
                raise ValueError(
                    f"{' and '.join(inert)} {'act' if len(inert) > 1 else 'acts'} only when summarize is true "
                    "(AgentCompass: enable_summarize): "
                    "remove them or turn summarization on"
                )
        elif self.proactive_summarization_threshold >= self.context_limit:
            raise ValueError(
                f"proactive_summarization_threshold ({self.proactive_summarization_threshold}) must be below "
                f"context_limit ({self.context_limit}): otherwise every turn is summarized"
            )
