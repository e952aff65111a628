"""``installed_agent``: an agent uploaded, installed and run inside the sandbox.

Phases (docs/agents.md, "Installed agents"):

1. ``install_agent`` (after ``start_harness``, before ``run_harness``; its own budget
   ``install_timeout_seconds`` in the plan, scaled by ``execution.timeout_multiplier``): each
   ``upload`` path (relative to the spec file's directory) is copied into ``agent_dir`` under its
   own name, then ``install`` runs there with ``ACX_AGENT_DIR``, ``ACX_TASK_ID`` and the run
   scope's variables (``environment.run_env_variables``) — no model variables (nothing installs
   with the attempt's gateway token). It is killed in the
   sandbox when the budget ends (``install_timeout``); a non-zero exit is ``install_failed``;
   both are fatal: the agent never runs.
2. ``run_harness``: ``command`` runs as the ``command`` harness runs its command (prompt on stdin
   and in ``prompt_file``, answer from stdout or ``answer_file``, the run budget T) with the
   gateway's variables (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``, … with a per-attempt token),
   ``model_env_aliases`` (the same values under the names the agent reads).
3. ``collect_harness_result``: the tails of the ``logs`` files (a directory: its files) go into
   ``telemetry.agent_logs`` (the attempt's gateway token replaced by ``[acx-gateway-token]``);
   the gateway's record of the agent's calls becomes the trajectory and usage (interpreter).

``agent = "NAME"`` takes the defaults of a shipped definition (``_agents.AGENTS``).
"""

from __future__ import annotations

import hashlib
import posixpath
import time
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from acx.components._configs import InstalledAgentConfig
from acx.components._context import HarnessContext
from acx.components.harnesses import _answer
from acx.components.harnesses._agents import AGENTS
from acx.components.harnesses._common import tail
from acx.components.harnesses._mcp_config import STARTUP_SECONDS, claude_config, codex_config, servers_for
from acx.components.harnesses.command import CommandHarness
from acx.errors import AcxPlanError, DriverError
from acx.ir import ExecutionIssue, HarnessPlan, RunRequest, RunResult, TaskSpec

__all__ = ["InstalledAgentHarness", "resolve_config"]

#: Files collected from one log directory, at most.
_MAX_LOG_FILES = 50


#: The variables the gateway gives an in-sandbox agent (``GatewaySession.env``, docs/models.md):
#: the only valid targets of ``model_env_aliases``.
GATEWAY_VARS = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ACX_MODEL_ID",
    "ACX_MODEL_PROTOCOL",
    "ACX_MODEL_BASE_URL",
    "ACX_MODEL_API_KEY",
)


def resolve_config(config: InstalledAgentConfig) -> InstalledAgentConfig:
    """The config with the named definition's defaults filled in (the user's fields win); a
    located plan error for an unknown definition or a config without a run command."""
    if config.agent is not None:
        if config.agent not in AGENTS:
            raise AcxPlanError(
                f"unknown installed agent {config.agent!r}",
                code="E0433",
                path="harness.params.agent",
                help=f"known agents: {', '.join(sorted(AGENTS))}; or leave `agent` unset and give `install`/`command`",
            )
        d = AGENTS[config.agent]
        defaults = msgspec.structs.asdict(InstalledAgentConfig())
        mine = msgspec.structs.asdict(config)
        changes: dict[str, Any] = {}
        for name, value in (
            ("install", d.install),
            ("command", d.command),
            ("logs", list(d.logs)),
        ):
            if mine[name] == defaults[name]:
                changes[name] = value
        changes["model_env_aliases"] = {**d.model_env_aliases, **config.model_env_aliases}
        # The definition's answer, unless the user says where the answer is (answer or answer_file).
        if config.answer is None and config.answer_file is None:
            changes["answer"] = d.answer
        config = msgspec.structs.replace(config, **changes)
    if config.command is None:
        raise AcxPlanError(
            "the installed_agent harness has no run command",
            code="E0433",
            path="harness.params.command",
            help="set `command` (the agent's command line) or `agent` (a shipped definition)",
        )
    unknown = sorted(var for var in config.model_env_aliases.values() if var not in GATEWAY_VARS)
    if unknown:
        # Such an alias used to be dropped without a word (the agent then missed its variable).
        raise AcxPlanError(
            f"model_env_aliases names {', '.join(map(repr, unknown))}, which the model gateway does not set",
            code="E0433",
            path="harness.params.model_env_aliases",
            help=f"alias one of {', '.join(GATEWAY_VARS)}; set other variables with environment.run_env_variables",
        )
    if config.answer is not None:
        if config.answer_file is not None:
            raise AcxPlanError(
                "both `answer` and `answer_file` say where the answer is",
                code="E0433",
                path="harness.params.answer",
                help='keep one: answer_file = "F" is answer = {from = "file", path = "F"}',
            )
        _answer.check(config.answer)
    if not posixpath.isabs(config.agent_dir):
        raise AcxPlanError(
            f"agent_dir {config.agent_dir!r} is not an absolute sandbox path",
            code="E0433",
            path="harness.params.agent_dir",
            help="give an absolute path such as /installed-agent",
        )
    return config


class InstalledAgentHarness(CommandHarness):
    id: ClassVar[str] = "installed_agent"
    description: ClassVar[str] = (
        "Uploads, installs (phase install_agent, own budget) and runs an agent inside the sandbox; "
        "it reaches the model only through the run's gateway."
    )
    # Not a CommandHarnessConfig subclass (``command`` is optional here), but every field the
    # inherited execute_task reads has the same name, type and meaning.
    config_class = InstalledAgentConfig  # type: ignore[assignment]
    #: The agent exists to call a model through the run's gateway (a program that needs no model
    #: is the ``command`` harness).
    requires_model: ClassVar[bool] = True
    #: Gives the agent the task's MCP servers (Harbor ``mcp_servers``; docs/agents.md).
    supports_mcp: ClassVar[bool] = True

    config: InstalledAgentConfig  # type: ignore[assignment]

    def __init__(self, config: InstalledAgentConfig) -> None:
        super().__init__(resolve_config(config))

    @property
    def _installs(self) -> bool:
        return bool(self.config.upload) or self.config.install is not None

    def build_plan(self, task: TaskSpec, req: RunRequest) -> HarnessPlan:
        plan = super().build_plan(task, req)
        self._check_mcp(task)
        if not self._installs:
            return plan
        c = self.config
        return msgspec.structs.replace(
            plan,
            install_timeout_seconds=c.install_timeout_seconds,
            install_cache_key=None if c.install_cache is False else self._install_key(),
            install_cache_required=c.install_cache is True,
        )

    def _mcp_servers(self, task: TaskSpec | None) -> list[Any]:
        return servers_for(self.config.mcp_servers, task.metadata if task is not None else None)

    def _check_mcp(self, task: TaskSpec) -> None:
        """A definition that cannot be given MCP servers is refused for a task that has some
        (E0481), and so is a transport its format cannot express (E0482): never run without them."""
        servers = self._mcp_servers(task)
        if not servers or self.config.agent is None:  # a custom command reads $ACX_MCP_CONFIG itself
            return
        d = AGENTS[self.config.agent]
        task_dir = task.metadata.get("task_dir") if isinstance(task.metadata, dict) else None
        where = (
            "harness.params.mcp_servers"
            if self.config.mcp_servers
            else f"{task_dir}/task.toml environment.mcp_servers"
            if task_dir
            else f"task {task.task_id} mcp_servers"
        )
        if d.mcp is None:
            supported = ", ".join(sorted(n for n, a in AGENTS.items() if a.mcp is not None))
            raise AcxPlanError(
                f"task {task.task_id!r} gives the agent MCP servers ({', '.join(s.name for s in servers)}), "
                f"which the {d.name} definition cannot be given",
                code="E0481",
                path=where,
                help=f"use an agent that reads MCP configuration ({supported}) or react, or a task without them",
            )
        for server in servers:
            if server.resolved_transport not in d.mcp_transports:
                raise AcxPlanError(
                    f"{d.name} cannot use MCP server {server.name!r}: its {server.resolved_transport} transport "
                    f"is not one {d.name} speaks ({', '.join(d.mcp_transports)})",
                    code="E0482",
                    path=where,
                    help="serve it over a transport the agent supports, or use react",
                )

    def _mcp_file(self) -> str:
        fmt = AGENTS[self.config.agent].mcp if self.config.agent else None
        return posixpath.join(self.config.agent_dir, "mcp-config.toml" if fmt == "codex" else "mcp-config.json")

    async def execute_task(self, ctx: HarnessContext) -> RunResult:
        servers = self._mcp_servers(ctx.task)
        if servers and ctx.session is not None:
            fmt = AGENTS[self.config.agent].mcp if self.config.agent else None
            text = codex_config(servers) if fmt == "codex" else claude_config(servers)
            await ctx.session.exec(["mkdir", "-p", self.config.agent_dir], timeout=ctx.clip(60.0))
            await ctx.session.write_text(self._mcp_file(), text)
        return await super().execute_task(ctx)

    def _install_key(self) -> str:
        """The install cache's plan-time key: what the install runs and sees that the config fixes
        (the uploads' content, the variables' values and the base image come in at run time)."""
        c = self.config
        fixed = AGENTS[c.agent].env if c.agent else {}
        data = msgspec.json.encode(
            {
                "format": _INSTALL_KEY_FORMAT,
                "install": c.install,
                "agent_dir": c.agent_dir,
                "upload": c.upload,
                "env": fixed,
            },
            order="sorted",
        )
        return "sha256:" + hashlib.sha256(data).hexdigest()[:24]

    def install_content_key(self) -> str:
        """The uploads' paths, modes and bytes (relative to the spec file's directory), hashed;
        a missing upload hashes as missing (the install then fails on it, uncached)."""
        digest = hashlib.sha256()
        base = Path(self.spec_dir or ".")
        for name in self.config.upload:
            digest.update(name.encode() + b"\0")
            _hash_tree(digest, base / name)
        return digest.hexdigest()[:24] if self.config.upload else ""

    def _base_env(self, ctx: HarnessContext) -> dict[str, str]:
        # The definition's fixed settings (no update checks, no telemetry); the user's own
        # variables come from environment.run_env_variables (the session's run scope, V4).
        fixed = AGENTS[self.config.agent].env if self.config.agent else {}
        env = {**fixed, "ACX_AGENT_DIR": self.config.agent_dir}
        if not ctx.install_layer:  # a cached install is shared by every task: it gets no task id
            env["ACX_TASK_ID"] = ctx.prepared.task_id
        return env

    def agent_env(self, ctx: HarnessContext, models: dict[str, str]) -> dict[str, str]:
        aliases = {name: models[var] for name, var in self.config.model_env_aliases.items() if var in models}
        env = {**self._base_env(ctx), **models, **aliases}
        servers = self._mcp_servers(ctx.task)
        if servers:  # the file execute_task wrote, in the agent's own format
            env["ACX_MCP_CONFIG"] = self._mcp_file()
            # Claude Code's per-call MCP budget (milliseconds): the longest server timeout.
            env["MCP_TOOL_TIMEOUT"] = str(int(max(s.timeout_seconds for s in servers) * 1000))
            env["MCP_TIMEOUT"] = str(int(STARTUP_SECONDS * 1000))  # its servers' start-up budget
        return env

    # ---- install_agent ------------------------------------------------------------------------
    async def install_agent(self, ctx: HarnessContext) -> list[ExecutionIssue]:
        c = self.config
        session = ctx.session
        assert session is not None
        started = time.monotonic()
        base = Path(self.spec_dir or ".")
        for name in c.upload:
            local = base / name
            if not local.exists():
                return [_install_issue("install_failed", f"upload {name!r}: {local} does not exist")]
            remote = posixpath.join(c.agent_dir, local.resolve().name)
            if local.is_dir():
                await session.upload_dir(str(local), remote)
            else:
                await session.exec(["mkdir", "-p", c.agent_dir], timeout=ctx.clip(60.0))
                await session.upload(str(local), remote)
        issues: list[ExecutionIssue] = []
        if c.install is not None:
            argv = ["bash", "-c", c.install] if isinstance(c.install, str) else list(c.install)
            await session.exec(["mkdir", "-p", c.agent_dir], timeout=ctx.clip(60.0))
            budget = ctx.remaining()
            if budget is not None and budget <= 0:
                return [_install_issue("install_timeout", "no install budget left after the upload")]
            res = await session.exec(argv, cwd=c.agent_dir, env=self._base_env(ctx), timeout=budget)
            if res.timed_out:
                issues.append(
                    _install_issue(
                        "install_timeout",
                        f"the install command exceeded its budget of {ctx.plan.install_timeout_seconds:g} s",
                    )
                )
            elif res.returncode != 0:
                issues.append(
                    _install_issue(
                        "install_failed",
                        f"the install command exited with {res.returncode}: {tail(res.stderr or res.stdout)}",
                    )
                )
        ctx.state = {"install_seconds": round(time.monotonic() - started, 3)}
        ctx.emit("agent_installed", {"ok": not issues, "seconds": ctx.state["install_seconds"]})
        return issues

    # ---- the answer ---------------------------------------------------------------------------
    async def read_answer(
        self, ctx: HarnessContext, res: Any, telemetry: dict[str, Any]
    ) -> tuple[str | None, list[ExecutionIssue]]:
        """The answer per ``answer`` (docs/agents.md "The answer"); without one, the command
        harness's (stdout or answer_file). With one, the raw stdout and stderr are kept as logs
        (``telemetry.agent_logs["stdout"]``/``["stderr"]``): they are no longer the answer."""
        spec = self.config.answer
        if spec is None:
            return await super().read_answer(ctx, res, telemetry)
        tokens = _gateway_tokens(ctx)
        logs: dict[str, str] = {}
        for name, text in (("stdout", res.stdout), ("stderr", res.stderr)):
            if text:
                logs[name] = self._log_text(text.encode("utf-8", "replace"), tokens)
        if logs:
            telemetry["agent_logs"] = logs
        path = _answer.source_path(spec)
        file_text: str | None = None
        file_error: str | None = None
        if path is not None:
            session = ctx.session
            assert session is not None
            try:
                file_text = await session.read_text(self._path(path))
            except FileNotFoundError:
                file_error = f"the agent wrote no file {path}"
            except IsADirectoryError:
                file_error = f"{path} is a directory"
            except DriverError as exc:
                if exc.code != "not_a_file":
                    raise
                file_error = f"{path} is not a regular file"
        got = _answer.extract(spec, res.stdout, file_text, file_error)
        if got.issue is None:
            return got.answer, []
        issue = got.issue
        if ctx.plan.evaluation_environment_mode in ("reuse", "fresh"):
            # The sandbox state is judged (a Harbor verifier), not the answer: a missing one is worth
            # saying, not an error that would retry an attempt whose work may be right.
            issue = msgspec.structs.replace(issue, severity="warning")
        return None, [issue]

    def _log_text(self, data: bytes, tokens: list[str]) -> str:
        limit = self.config.max_log_bytes
        text = data[-limit:].decode("utf-8", "replace")
        for token in tokens:  # an agent that logs its environment: the token stays out
            text = text.replace(token, _TOKEN_MARK)
        return text if len(data) <= limit else f"[{len(data) - limit} bytes elided]\n{text}"

    # ---- collect_result -----------------------------------------------------------------------
    async def collect_result(self, ctx: HarnessContext, partial: RunResult | None) -> RunResult | None:
        """The tails of the agent's log files into ``telemetry.agent_logs`` (also after a timeout)."""
        if partial is None:
            partial = RunResult(task_id=ctx.prepared.task_id)
        telemetry = dict(partial.telemetry)
        if isinstance(ctx.state, dict) and "install_seconds" in ctx.state:
            telemetry["install_seconds"] = ctx.state["install_seconds"]
        logs = await self._read_logs(ctx)
        if logs:
            telemetry["agent_logs"] = {**telemetry.get("agent_logs", {}), **logs}
        return msgspec.structs.replace(partial, telemetry=telemetry)

    async def _read_logs(self, ctx: HarnessContext) -> dict[str, str]:
        session = ctx.session
        assert session is not None
        tokens = _gateway_tokens(ctx)
        out: dict[str, str] = {}
        for path in self.config.logs:
            for f in await self._log_files(ctx, path):
                try:
                    data = await session.read_bytes(f)
                except (FileNotFoundError, IsADirectoryError, OSError):
                    continue
                out[f] = self._log_text(data, tokens)
        return out

    async def _log_files(self, ctx: HarnessContext, path: str) -> list[str]:
        session = ctx.session
        assert session is not None
        if await session.is_file(path):
            return [path]
        if not await session.is_dir(path):
            return []
        res = await session.exec(["find", path, "-type", "f"], timeout=30.0)
        return sorted(res.stdout.split("\n"))[:_MAX_LOG_FILES] if res.ok else []


_TOKEN_MARK = "[acx-gateway-token]"
#: Bumped when what the install cache key covers changes (old images then no longer match).
_INSTALL_KEY_FORMAT = "acx-install-1"


def _hash_tree(digest: Any, path: Path) -> None:
    """Relative paths, modes and contents of a file or directory tree into ``digest``."""
    if not path.exists():
        digest.update(b"missing\0")
        return
    members = [path] if not path.is_dir() else sorted(p for p in path.rglob("*"))
    for p in members:
        digest.update(p.relative_to(path).as_posix().encode() + b"\0" if p != path else b".\0")
        if p.is_symlink():
            digest.update(b"L" + str(p.readlink()).encode())
        elif p.is_file():
            st = p.stat()
            digest.update(f"{st.st_mode & 0o777:o} {st.st_size}\0".encode())
            with p.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)


def _gateway_tokens(ctx: HarnessContext) -> list[str]:
    """The attempt's gateway tokens the agent was given (none without a model)."""
    if ctx.models is None:
        return []
    try:
        env = ctx.models.env()
    except (KeyError, AttributeError):
        return []
    return sorted({v for k, v in env.items() if k.endswith("API_KEY") and v})


def _install_issue(code: str, message: str) -> ExecutionIssue:
    return ExecutionIssue(severity="fatal", phase="setup", code=code, message=message)
