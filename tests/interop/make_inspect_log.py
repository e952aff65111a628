"""Run an eval with inspect-ai itself and print its log's path and its own results, as JSON:
a tiny task (three samples, two epochs) with its `mockllm` model answering from the prompt, a tool
call on one sample, and the `includes` scorer. Usage: make_inspect_log.py LOG_DIR FORMAT."""

from __future__ import annotations

import json
import sys
from typing import Any

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import tool


@tool
def add() -> Any:
    async def execute(x: int, y: int) -> str:
        """Add two numbers.

        Args:
          x: the first
          y: the second
        """
        return str(x + y)

    return execute


def answer(messages: list[Any], tools: Any, tool_choice: Any, config: Any) -> ModelOutput:
    prompt = messages[0].text
    if "2+2" in prompt and messages[-1].role == "user":
        out = ModelOutput.for_tool_call("mockllm", "add", {"x": 2, "y": 2})
    elif "2+2" in prompt:
        out = ModelOutput.from_content("mockllm", f"It is {messages[-1].text}")
    elif "capital" in prompt:
        out = ModelOutput.from_content("mockllm", "Paris")
    else:
        out = ModelOutput.from_content("mockllm", "no idea")
    out.usage = ModelUsage(input_tokens=10 * len(messages), output_tokens=3, total_tokens=10 * len(messages) + 3)
    return out


def main(log_dir: str, fmt: str) -> None:
    task = Task(
        dataset=[
            Sample(input="What is 2+2?", target="4", id="sum"),
            Sample(input="What is the capital of France?", target="Paris", id="capital"),
            Sample(input="What is 7 squared?", target="49", id="square"),
        ],
        solver=[use_tools(add()), generate()],
        scorer=includes(),
        epochs=2,
    )
    model = get_model("mockllm/model", custom_outputs=answer)
    (log,) = eval(task, model=model, log_dir=log_dir, log_format=fmt, display="none")
    assert log.results is not None and log.samples is not None
    print(
        json.dumps(
            {
                "location": log.location,
                "status": log.status,
                "accuracy": log.results.scores[0].metrics["accuracy"].value,
                "scorer": log.results.scores[0].name,
                "samples": [[s.id, s.epoch, s.scores["includes"].value] for s in log.samples],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
