"""``openai_chat``: one OpenAI-compatible chat completion per task.

``POST {model.base_url}/chat/completions`` with the task's system prompt and prompt; the answer is
the first choice's message content. The API key is resolved from its ``${VAR}`` reference only
inside the call and never logged or stored. Uses the standard library (``urllib``) in a worker
thread, so a deadline abandons the request promptly.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, ClassVar

from acx.components._base import BaseHarness
from acx.components._configs import OpenAIChatConfig
from acx.ir import ExecutionIssue, ExecutionPlan, PreparedTask, RunRequest, RunResult

__all__ = ["OpenAIChatHarness", "chat_completion"]


def chat_completion(url: str, payload: dict[str, Any], api_key: str | None, timeout: float) -> dict[str, Any]:
    """Blocking HTTP call (run in a thread). Raises ``RuntimeError`` with a redacted message."""
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            body: dict[str, Any] = json.loads(resp.read().decode("utf-8"))
            return body
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"HTTP {exc.code} from the model endpoint") from None
    except urllib.error.URLError as exc:
        raise RuntimeError(f"model endpoint unreachable: {exc.reason}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RuntimeError("model endpoint returned a non-JSON body") from None


class OpenAIChatHarness(BaseHarness):
    id: ClassVar[str] = "openai_chat"
    description: ClassVar[str] = "One OpenAI-compatible chat completion per task."
    config_class = OpenAIChatConfig
    calls_model: ClassVar[bool] = True
    parallel_attempts_safe: ClassVar[bool] = True

    config: OpenAIChatConfig

    async def execute_task(
        self, state: Any, session: Any, prepared: PreparedTask, req: RunRequest, plan: ExecutionPlan
    ) -> RunResult:
        import trio

        from acx.interpreter._envvars import resolve_value

        m = req.model
        if not m.base_url or not m.id:
            return RunResult(
                task_id=prepared.task_id,
                issues=[
                    ExecutionIssue(
                        severity="fatal",
                        phase="setup",
                        code="model_failed",
                        message="openai_chat needs model.id and model.base_url",
                    )
                ],
            )
        base_url = resolve_value(m.base_url, os.environ).rstrip("/")
        api_key = resolve_value(m.api_key, os.environ) if m.api_key else None
        messages: list[dict[str, Any]] = []
        system = self.config.system_prompt or prepared.input.system_prompt
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prepared.input.prompt})
        payload: dict[str, Any] = {"model": m.id, "messages": messages, **m.params}
        if self.config.max_tokens is not None:
            payload["max_tokens"] = self.config.max_tokens
        if self.config.temperature is not None:
            payload["temperature"] = self.config.temperature
        started = time.monotonic()
        try:
            body = await trio.to_thread.run_sync(
                chat_completion,
                f"{base_url}/chat/completions",
                payload,
                api_key,
                self.config.request_timeout_seconds,
                abandon_on_cancel=True,
            )
        except RuntimeError as exc:
            return RunResult(
                task_id=prepared.task_id,
                issues=[ExecutionIssue(severity="error", phase="run", code="model_failed", message=str(exc))],
            )
        latency = round(time.monotonic() - started, 3)
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            return RunResult(
                task_id=prepared.task_id,
                telemetry={"latency_seconds": latency},
                issues=[
                    ExecutionIssue(
                        severity="error",
                        phase="run",
                        code="model_output_invalid",
                        message="the response has no choices[0].message.content",
                    )
                ],
            )
        raw_usage = body.get("usage")
        usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        trajectory = {
            "schema_version": "ACTF_v1.0",
            "steps": [
                {
                    "step_id": 1,
                    "system_prompt": system,
                    "user_content": prepared.input.prompt,
                    "assistant_content": {"content": content},
                    "metric": {
                        "prompt_tokens_len": usage.get("prompt_tokens"),
                        "completion_tokens_len": usage.get("completion_tokens"),
                        "llm_infer_ms": int(latency * 1000),
                    },
                }
            ],
        }
        issues = []
        if not content:
            issues.append(
                ExecutionIssue(
                    severity="warning",
                    phase="run",
                    code="model_empty_output",
                    message="the model returned an empty message",
                )
            )
        return RunResult(
            task_id=prepared.task_id,
            final_answer=content,
            trajectory=trajectory,
            issues=issues,
            telemetry={"latency_seconds": latency, "usage": usage},
        )
