"""`python-tool`: answer a question, with a Python interpreter at hand between turns.

    first observation   "What is 4817 * 2293 - 51?\n<python>code</python> runs it; <answer>...</answer> ends.\n"
    action              "<python>print(4817 * 2293 - 51)</python>"
    observation         "<output>\n11045330\n</output>\n"
    action              "<answer>11045330</answer>"      (reward 1 when it equals the row's answer)

Code runs in the sandbox (`rewards.sandbox`: no network, an emptied environment, limits), as a
fresh child of the calling thread's warm sandbox, its output cut to `MAX_OUTPUT_CHARS`; a program
that fails shows its status and the last lines of its stderr. An action with neither marker gets
the instructions again; an answer ends the episode. Rows: `{"question": ..., "answer": ...}` from
task.path, or generated arithmetic with numbers large enough that running code pays.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Mapping
from typing import Any

from rewards.env.base import Environment, StepResult
from rewards.sandbox import SandboxLimits, run_python, sandbox_unavailable_reason

CODE = re.compile(r"<python>(.*?)(?:</python>|$)", re.DOTALL)
ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL)
HELP = "<python>code</python> runs it; <answer>...</answer> ends.\n"
MAX_OUTPUT_CHARS = 400
LIMITS = SandboxLimits(wall_s=5.0, cpu_s=5.0, memory_mb=256)


class PythonTool(Environment):
    deterministic = True  # the same code gives the same output (a replay checks that it does)
    alphabet = string.printable
    stop = ("</python>", "</answer>")

    def setup(self) -> None:
        reason = sandbox_unavailable_reason()
        if reason is not None:
            raise RuntimeError(f"python-tool runs code in the sandbox, which is unavailable here: {reason}")

    def reset(self, row: Mapping[str, Any]) -> str:
        self.answer = str(row["answer"]).strip()
        return f"{row['question']}\n{HELP}"

    def step(self, action: str) -> StepResult:
        answered = ANSWER.search(action)
        if answered:
            return StepResult("", float(answered.group(1).strip() == self.answer), True)
        code = CODE.search(action)
        if not code:
            return StepResult(HELP, 0.0, False, {"tool": "none: the instructions again"})
        output, status = _output(code.group(1))
        return StepResult(
            f"<output>\n{output}\n</output>\n", 0.0, False, {"tool": "python", "status": status}
        )

    @classmethod
    def generate_row(cls, index: int, seed: int) -> dict[str, str]:
        rng = random.Random(f"python-tool:{seed}:{index}")
        a, b, c = rng.randint(1000, 9999), rng.randint(100, 9999), rng.randint(1, 99)
        op = rng.choice(["+", "-", "*"])
        return {"question": f"What is {a} {op} {b} - {c}?", "answer": str(eval(f"{a} {op} {b} - {c}"))}  # noqa: S307

    @classmethod
    def demonstration(cls, row: Mapping[str, Any], rng: random.Random) -> list[str]:
        expression = str(row["question"]).removeprefix("What is ").rstrip("?")
        return [f"<python>print({expression})", f"<answer>{row['answer']}"]


def _output(code: str) -> tuple[str, str]:
    """What the policy is shown of running `code`, and the sandbox's status."""
    result = run_python(code, limits=LIMITS)
    if result.ok:
        text = result.stdout
    else:
        tail = "\n".join(result.stderr.strip().splitlines()[-3:])
        text = f"[{result.status}] {tail or result.detail}"
    text = text.strip()
    return (text if len(text) <= MAX_OUTPUT_CHARS else text[: MAX_OUTPUT_CHARS - 3] + "..."), result.status
