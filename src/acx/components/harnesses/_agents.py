"""Shipped definitions of widely used CLI agents for the ``installed_agent`` harness.

Each is the defaults of an ``installed_agent`` config (``agent = "NAME"``): how the agent is
installed, the command line that runs it non-interactively on the task prompt, which gateway
variables it reads under which names, and where it writes its logs. Any field the user sets in
the harness config replaces the definition's. The install commands fetch from the public package
registries (PyPI, npm): under ``no-network`` they cannot, so real use either bakes the agent into
the task image (set ``install = "true"`` or a version check) or installs from uploaded wheels or
tarballs (``upload`` + an offline install command). See docs/agents.md.

Pure data: imported at plan time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from acx.components._configs import AnswerFromFile, AnswerFromJsonl, AnswerSpec

__all__ = ["AGENTS", "AgentDefinition"]

#: Where the definitions write their logs; collected after the run (``logs``).
LOG_DIR = "/logs/agent"


@dataclass(frozen=True)
class AgentDefinition:
    name: str
    install: str
    command: str
    #: NAME = gateway variable (``OPENAI_BASE_URL``, ``ACX_MODEL_ID``…) the agent reads as NAME.
    model_env_aliases: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)
    #: The protocol the agent speaks (the gateway translates to the model's own).
    protocol: str = "openai-chat"
    #: Where the agent's answer is (None: its whole stdout); docs/agents.md "The answer".
    answer: AnswerSpec | None = None
    #: The MCP config format the agent reads (``claude-code`` JSON, ``codex`` TOML) from the file
    #: ``$ACX_MCP_CONFIG`` when the task has MCP servers; None: the agent cannot be given any.
    mcp: str | None = None
    #: The MCP transports that format can express.
    mcp_transports: tuple[str, ...] = ("stdio", "sse", "streamable-http")


_MKDIR = f"mkdir -p {LOG_DIR} && "
#: The run command is ``bash -c``: with pipefail a ``| tee`` keeps the agent's exit status (a
#: failing agent is agent_exit_nonzero, not tee's 0).
_PIPEFAIL = "set -o pipefail; "

#: aider's reply in its chat history: after the last run of "#### " (user message) lines and a
#: blank line, up to its "> Tokens:" line.
AIDER_REPLY = r"(?ms)^####(?: [^\n]*)?\n(?:####(?: [^\n]*)?\n)*\n(?P<answer>.*?)\n+> Tokens: "

#: OpenCode's provider config: the gateway as an OpenAI-compatible provider "acx" (the
#: @ai-sdk/openai-compatible adapter is bundled in the opencode binary: nothing is fetched), its
#: one model the attempt's model id. Values are opencode {env:…} references.
_OPENCODE_CONFIG = json.dumps(
    {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "provider": {
            "acx": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "acx gateway",
                "options": {"baseURL": "{env:OPENAI_BASE_URL}", "apiKey": "{env:OPENAI_API_KEY}"},
                "models": {"{env:ACX_MODEL_ID}": {"name": "{env:ACX_MODEL_ID}"}},
            }
        },
    },
    separators=(",", ":"),
)

AGENTS: dict[str, AgentDefinition] = {
    "mini-swe-agent": AgentDefinition(
        name="mini-swe-agent",
        install="python3 -m pip install --no-input mini-swe-agent",
        # -y: execute actions without confirmation; --exit-immediately: no "continue?" prompt at the
        # end; -o: the agent's own trajectory file. litellm routes "openai/<model>" to
        # OPENAI_API_BASE/OPENAI_BASE_URL.
        command=_MKDIR + 'mini -y --exit-immediately -m "openai/$ACX_MODEL_ID" -t "$(cat "$ACX_PROMPT_FILE")" '
        f"-o {LOG_DIR}/mini.traj.json",
        model_env_aliases={"OPENAI_API_BASE": "OPENAI_BASE_URL", "MSWEA_MODEL_NAME": "ACX_MODEL_ID"},
        # MSWEA_CONFIGURED skips the first-run setup wizard; unknown models have no litellm price.
        # LITELLM_LOCAL_MODEL_COST_MAP: litellm's bundled price map, not a download that retries
        # for seconds in a sandbox without network.
        env={
            "MSWEA_CONFIGURED": "true",
            "MSWEA_COST_TRACKING": "ignore_errors",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        },
        logs=[f"{LOG_DIR}/mini.traj.json"],
        # The saved trajectory (format mini-swe-agent-1.1): info.submission is the output after the
        # COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT line, "" unless info.exit_status is "Submitted".
        answer=AnswerFromFile(
            path=f"{LOG_DIR}/mini.traj.json", json_path="info.submission", where={"info.exit_status": "Submitted"}
        ),
    ),
    "claude-code": AgentDefinition(
        name="claude-code",
        install="npm install -g @anthropic-ai/claude-code",
        # -p: print mode (one task, then exit); stream-json (needs --verbose) is the session log.
        # --mcp-config only when acx wrote the task's MCP servers ($ACX_MCP_CONFIG set), as "$@"
        # (no ${...} in a shipped command: a config that copies it would be refused, R6).
        command=_PIPEFAIL
        + 'if [ -n "$ACX_MCP_CONFIG" ]; then set -- --mcp-config "$ACX_MCP_CONFIG" --strict-mcp-config; fi; '
        + _MKDIR
        + 'claude -p "$(cat "$ACX_PROMPT_FILE")" --model "$ACX_MODEL_ID" "$@" '
        "--dangerously-skip-permissions --output-format stream-json --verbose "
        f"| tee {LOG_DIR}/claude.jsonl",
        # ANTHROPIC_BASE_URL/ANTHROPIC_API_KEY come from the gateway as they are.
        env={
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "IS_SANDBOX": "1",
        },
        logs=[f"{LOG_DIR}/claude.jsonl"],
        protocol="anthropic",
        # stream-json ends with {"type":"result","subtype":"success","is_error":false,"result":…};
        # an error ending (is_error true, or no result field) is no answer.
        answer=AnswerFromJsonl(
            path=f"{LOG_DIR}/claude.jsonl", where={"type": "result", "is_error": False}, field="result"
        ),
        mcp="claude-code",
    ),
    "codex": AgentDefinition(
        name="codex",
        install="npm install -g @openai/codex",
        # Tested with @openai/codex 0.171.0 (tests/agents/test_codex_real.py). exec: non-interactive;
        # the sandbox is acx's, so codex's own is off; --json: the event log on stdout; -o: the final
        # message (the answer) in a file. Codex exits at once when CODEX_HOME does not exist, and it
        # ignores OPENAI_BASE_URL: the model is a custom provider "acx" at the gateway (-c), whose
        # key is read from CODEX_API_KEY (env_key); a custom provider has supports_websockets =
        # false, so codex posts /v1/responses over HTTP at once (the built-in "openai" provider
        # tries a WebSocket first). stdin is /dev/null: codex appends a piped stdin to the prompt.
        # pipefail keeps codex's exit status through tee.
        command=_PIPEFAIL
        + _MKDIR
        + 'mkdir -p "$CODEX_HOME" && '
        # The task's MCP servers ([mcp_servers.<name>] tables) are codex's config.toml.
        + 'if [ -n "$ACX_MCP_CONFIG" ]; then cp "$ACX_MCP_CONFIG" "$CODEX_HOME/config.toml"; fi && '
        + "codex exec --skip-git-repo-check --sandbox danger-full-access --json "
        "-c model_provider=acx -c model_providers.acx.name=acx -c model_providers.acx.wire_api=responses "
        '-c "model_providers.acx.base_url=\\"$OPENAI_BASE_URL\\"" -c model_providers.acx.env_key=CODEX_API_KEY '
        "-c model_providers.acx.supports_websockets=false -c check_for_update_on_startup=false "
        "-c analytics.enabled=false -c feedback.enabled=false "
        f'-m "$ACX_MODEL_ID" -o {LOG_DIR}/codex-last-message.txt "$(cat "$ACX_PROMPT_FILE")" </dev/null '
        f"| tee {LOG_DIR}/codex.jsonl",
        model_env_aliases={"CODEX_API_KEY": "OPENAI_API_KEY"},
        # Update check, analytics and feedback uploads are off through -c above.
        env={"CODEX_HOME": f"{LOG_DIR}/codex-home"},
        logs=[f"{LOG_DIR}/codex.jsonl", f"{LOG_DIR}/codex-last-message.txt"],
        protocol="openai-responses",
        # -o: codex writes its last agent message there.
        answer=AnswerFromFile(path=f"{LOG_DIR}/codex-last-message.txt"),
        mcp="codex",
        # codex speaks stdio and streamable HTTP, not the older SSE transport.
        mcp_transports=("stdio", "streamable-http"),
    ),
    "opencode": AgentDefinition(
        name="opencode",
        install="npm install -g opencode-ai",
        # Tested with opencode-ai 1.18.33 (tests/agents/test_opencode_real.py). `run`: one message,
        # then exit (1 when the model call fails); --format json: one JSON event per line (the
        # session log, and the answer); --auto: approve tool permissions (acx's sandbox is the
        # boundary); --title: no extra model call to name the session; --print-logs: opencode's own
        # log on stderr (kept). stdin is /dev/null (nothing to wait for). After the run the session
        # (messages, tool calls, tokens) is exported from opencode's store; that step never changes
        # the exit status, which pipefail kept through tee.
        command=_PIPEFAIL
        + _MKDIR
        + "opencode run --format json --auto --title acx --print-logs --log-level INFO "
        + f'-m "acx/$ACX_MODEL_ID" "$(cat "$ACX_PROMPT_FILE")" </dev/null | tee {LOG_DIR}/opencode.jsonl; '
        + "rc=$?; "
        + f'sid=$(grep -o -m 1 \'"sessionID":"[^"]*"\' {LOG_DIR}/opencode.jsonl | head -n 1 | cut -d \'"\' -f 4); '
        + f'if [ -n "$sid" ]; then opencode export "$sid" > {LOG_DIR}/opencode-session.json 2>/dev/null; fi; '
        + 'exit "$rc"',
        env={
            # opencode reads this inline config last (over the global and project files); its
            # {env:NAME} references are filled from the environment by opencode itself, so the
            # per-attempt token is never written anywhere.
            "OPENCODE_CONFIG_CONTENT": _OPENCODE_CONFIG,
            # No models.dev download, no self-update, no LSP server downloads, no sharing, no
            # built-in auth plugins (each would reach the network).
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        },
        logs=[f"{LOG_DIR}/opencode.jsonl", f"{LOG_DIR}/opencode-session.json"],
        # The answer is the text of the last "text" event ({"type":"text","part":{"text":…}}): the
        # reply of the step that ended the run. A failed run has an "error" event and no text after.
        answer=AnswerFromJsonl(path=f"{LOG_DIR}/opencode.jsonl", where={"type": "text"}, field="part.text"),
    ),
    "aider": AgentDefinition(
        name="aider",
        install="python3 -m pip install --no-input aider-chat",
        # Tested with aider-chat 0.86.2 (tests/agents/test_aider_real.py). --message-file: one
        # message, then exit; --yes-always: apply edits and create files without asking;
        # --no-show-release-notes: no first-run question; --no-pretty: plain text on stdout (kept as
        # a log). aider exits 0 even when the model call fails (it prints the error), so the answer
        # is what tells success: a failed call leaves no reply in the chat history.
        command=_MKDIR + 'aider --message-file "$ACX_PROMPT_FILE" --model "openai/$ACX_MODEL_ID" --yes-always '
        "--no-git --no-auto-commits --no-check-update --no-show-model-warnings --no-show-release-notes "
        "--no-pretty --analytics-disable "
        f"--chat-history-file {LOG_DIR}/aider.chat.md --llm-history-file {LOG_DIR}/aider.llm.log",
        model_env_aliases={"OPENAI_API_BASE": "OPENAI_BASE_URL"},
        # litellm's bundled price map, not a download (aider's own model-info fetch fails fast offline).
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        logs=[f"{LOG_DIR}/aider.chat.md", f"{LOG_DIR}/aider.llm.log"],
        # The chat history (markdown): the user's message as "#### " lines, a blank line, the
        # model's reply, then aider's "> Tokens: …" line. A failed call has "> <error>" and no
        # Tokens line: no match, no answer.
        answer=AnswerFromFile(path=f"{LOG_DIR}/aider.chat.md", regex=AIDER_REPLY),
    ),
    "openhands": AgentDefinition(
        name="openhands",
        install="python3 -m pip install --no-input openhands",
        # Tested with openhands 1.16.0 (its SDK 1.21.0; tests/agents/test_openhands_real.py).
        # --headless: auto-approve, no UI; --json: each event as one JSON line among its console
        # lines; --override-with-envs: the LLM_* variables apply (else ignored). OpenHands exits 0
        # even when the model call fails (a ConversationErrorEvent), so the answer is what tells
        # success. Its conversation (one JSON file per event) is kept under /logs/agent.
        command=_PIPEFAIL
        + _MKDIR
        + 'LLM_MODEL="openai/$ACX_MODEL_ID" openhands --headless --json --override-with-envs '
        f'-f "$ACX_PROMPT_FILE" </dev/null | tee {LOG_DIR}/openhands.jsonl',
        model_env_aliases={"LLM_BASE_URL": "OPENAI_BASE_URL", "LLM_API_KEY": "OPENAI_API_KEY"},
        env={
            "OPENHANDS_CONVERSATIONS_DIR": f"{LOG_DIR}/openhands-conversations",
            "OPENHANDS_SUPPRESS_BANNER": "1",
            # litellm's bundled price map: its download retries for seconds in an offline sandbox.
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        },
        logs=[f"{LOG_DIR}/openhands.jsonl", f"{LOG_DIR}/openhands-conversations"],
        # The agent's last event: its `finish` action ({"kind": "ActionEvent", "action": {"message":
        # …}}) or a plain reply ({"kind": "MessageEvent", "llm_message": {"content": [{"text": …}]}}).
        # An agent whose last event is a tool call or an error has no answer.
        answer=AnswerFromJsonl(
            path=f"{LOG_DIR}/openhands.jsonl",
            where={"source": "agent"},
            field=["action.message", "llm_message.content.0.text"],
        ),
    ),
}
