"""The default grader client: one OpenAI-compatible chat completion per grading call.

It reuses the one HTTP helper of the built-in ``openai_chat`` harness (stdlib ``urllib`` in a
worker thread, abandoned on cancel), so acx still has a single place that speaks HTTP to models.
This is the seam the ``acx.models`` gateway absorbs: anything with the
:class:`~acx.components.scorers._model_graded.GraderClient` ``complete`` method can be passed to
the scorer instead. The API key is resolved from its ``${VAR}`` reference only inside the call.
"""

from __future__ import annotations

import os
from typing import Any

from acx.components.scorers._model_graded import GraderError, GraderReply
from acx.ir import ModelSpec

__all__ = ["OpenAIChatGrader"]


class OpenAIChatGrader:
    async def complete(
        self, model: ModelSpec, messages: list[dict[str, Any]], *, timeout_seconds: float
    ) -> GraderReply:
        import trio

        from acx.components.harnesses.openai_chat import chat_completion
        from acx.interpreter._envvars import MissingEnvError, resolve_value

        try:
            base_url = resolve_value(model.base_url or "", os.environ).rstrip("/")
            api_key = resolve_value(model.api_key, os.environ) if model.api_key else None
        except MissingEnvError as exc:
            raise GraderError(f"environment variable(s) not set: {', '.join(exc.names)}") from None
        payload: dict[str, Any] = {"model": model.id, "messages": messages, **model.params}
        try:
            body = await trio.to_thread.run_sync(
                chat_completion,
                f"{base_url}/chat/completions",
                payload,
                api_key,
                timeout_seconds,
                abandon_on_cancel=True,
            )
        except RuntimeError as exc:
            raise GraderError(str(exc)) from None
        except OSError as exc:  # socket timeout inside urllib
            raise GraderError(f"model endpoint error: {type(exc).__name__}") from None
        try:
            text = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise GraderError("the response has no choices[0].message.content") from None
        if not isinstance(text, str):
            raise GraderError("the grader's message content is not text")
        usage = body.get("usage")
        return GraderReply(text=text, usage=usage if isinstance(usage, dict) else {})
