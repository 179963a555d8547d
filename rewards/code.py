"""The `code` task's reward: a completion's program run against its tests in the sandbox.

An item's tests come as its fields, in the shapes code data sets use:
- assert lines (MBPP): `test_list`, with an optional `test_setup` run after the code;
- a check function (HumanEval): `test` defines `check(candidate)`, `entry_point` names the
  function; a completion that does not define that function continues `prompt` (its head);
- stdin/stdout pairs: `tests: [{"input": ..., "output": ...}]`, the program run once per pair, its
  output compared line by line with trailing spaces and blank lines dropped.

The program is the completion's first fenced python block when it has one, else the whole
completion. Every run goes through `rewards.sandbox` (own namespaces, no network, limits); nothing
of a completion ever runs in this process, and no verdict comes from the process that ran it: the
program only answers the tests' probes (`f(2)`), as plain values, and the tests themselves run in a
judge that never ran it (`rewards/code_judge.py`). The check function is one test. The reward is
the share of tests passed (or
1/0 with all_or_nothing); a run that ends `failed` (the code itself raised), `timeout`, `memory`,
`output_limit` or `killed` scores 0 with its status kept; `sandbox_error` is no score at all
(the sandbox could not run it), raised as `SandboxFailure`.

    code_reward(completion, test_list=["assert f(2) == 4"])   # a user reward taking row fields by name
    CodeScorer(all_or_nothing=False)                           # the scorer of `task.name: code`
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from rewards.code_judge import Judge, Plan
from rewards.config import RewardConfig
from rewards.result import INVALID, OK
from rewards.scorer import Part, RewardComponent, Scorer
from rewards.user_reward import Fields

SANDBOX_OK, SANDBOX_ERROR = "ok", "sandbox_error"
# The fields a code item may carry (its tests, and the prompt a HumanEval completion continues).
TEST_FIELDS = ("test_list", "test_setup", "test", "entry_point", "tests", "prompt")
_PYTHON_INFO = ("python", "py", "python3")
_DETAIL_CHARS = 300
_MEMO_SIZE = 4096  # outcomes a scorer remembers
_REPEATABLE = frozenset({SANDBOX_OK, "failed"})


class SandboxFailure(RuntimeError):
    """The sandbox could not run a program (`sandbox_error`): the item gets no reward, not a 0."""


class CodeOutcome(NamedTuple):
    """What running one completion against its tests showed."""

    passed: int
    total: int
    status: str  # the sandbox's status of the run that decided it ("ok" when every run ended well)
    detail: str = ""

    def reward(self, all_or_nothing: bool = False) -> float:
        """The share of tests passed (1/0 with all_or_nothing); 0 when a run did not end well."""
        if self.status != SANDBOX_OK or self.total == 0:
            return 0.0
        if all_or_nothing:
            return 1.0 if self.passed == self.total else 0.0
        return self.passed / self.total


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of each ``` block, fences at the start of a line; an unclosed one runs to the end."""
    blocks: list[tuple[str, str]] = []
    info: str | None = None
    body: list[str] = []
    for line in text.splitlines(keepends=True):
        fence = line.lstrip().startswith("```")
        if info is None and fence:
            info, body = line.lstrip()[3:].strip().lower(), []
        elif info is not None and fence:
            blocks.append((info, "".join(body)))
            info = None
        elif info is not None:
            body.append(line)
    if info is not None:
        blocks.append((info, "".join(body)))
    return blocks


def extract_code(completion: str) -> str:
    """The first fenced python block (```python, ```py, ```python3), else the first bare ``` block,
    else the whole completion."""
    blocks = fenced_blocks(completion)
    for wanted in (_PYTHON_INFO, ("",)):
        for info, body in blocks:
            if info in wanted:
                return body
    return completion


def program_of(completion: str, prompt: str | None = None, entry_point: str | None = None) -> str:
    """The code to run: the extracted block; a HumanEval body that does not define `entry_point`
    continues `prompt`."""
    code = extract_code(completion)
    if entry_point and prompt and not re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.M):
        return prompt + code
    return code


def _run(source: str, stdin: str, limits: Any) -> Any:
    from rewards.sandbox import run_python  # the sandbox loads with the first run, never at import

    return run_python(source, stdin=stdin, limits=limits)


def _detail(result: Any) -> str:
    text = result.detail or result.stderr or ""
    return str(text)[-_DETAIL_CHARS:]


def _checked(result: Any) -> Any:
    if result.status == SANDBOX_ERROR:
        raise SandboxFailure(f"the sandbox could not run the program: {_detail(result)}")
    return result


def _judged(code: str, plan: Plan, total: int, limits: Any) -> CodeOutcome:
    verdict = Judge(lambda source, stdin, lim: _run(source, stdin, lim), limits, _checked).judge(code, plan)
    return CodeOutcome(
        min(verdict.passed, total), total, verdict.status, str(verdict.detail)[-_DETAIL_CHARS:]
    )


def run_asserts(code: str, tests: Sequence[str], setup: str = "", limits: Any = None) -> CodeOutcome:
    """Count the assert lines `code` passes: the program answers the tests' probes in its own
    sandboxed run, and the verdicts come from outside it (`code_judge.py`)."""
    plan = Plan(tests=tuple(tests), setup=setup, preludes=(), check=False, entry="")
    return _judged(code, plan, len(tests), limits)


def run_check(
    code: str, test: str, entry_point: str, prompt: str | None = None, limits: Any = None
) -> CodeOutcome:
    """One test: HumanEval's `check(candidate)` run in the judge, each call of `candidate` answered
    by the program's `entry_point` in its own sandboxed run."""
    plan = Plan(tests=(test,), setup="", preludes=(prompt or "",), check=True, entry=entry_point)
    return _judged(code, plan, 1, limits)


def same_output(got: str, expected: str) -> bool:
    """Outputs equal line by line, trailing spaces of each line and trailing blank lines dropped."""

    def lines(text: str) -> list[str]:
        out = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
        while out and not out[-1]:
            out.pop()
        return out

    return lines(got) == lines(expected)


def run_io(code: str, tests: Sequence[Mapping[str, str]], limits: Any = None) -> CodeOutcome:
    """Run `code` once per {input, output} pair; the first run that does not end well decides."""
    passed = 0
    for case in tests:
        result = _checked(_run(code, case["input"], limits))
        if result.status != SANDBOX_OK:
            return CodeOutcome(0, len(tests), result.status, _detail(result))
        passed += same_output(result.stdout, case["output"])
    return CodeOutcome(passed, len(tests), SANDBOX_OK)


def run_tests(completion: str, fields: Mapping[str, Any], limits: Any = None) -> CodeOutcome:
    """The completion's program against the item's tests (its fields, in one of the three shapes);
    SandboxFailure on `sandbox_error`, ValueError for fields in none of the shapes."""
    if fields.get("test_list") is not None:
        code = extract_code(completion)
        return run_asserts(code, fields["test_list"], fields.get("test_setup") or "", limits)
    if fields.get("test") is not None and fields.get("entry_point"):
        entry = fields["entry_point"]
        code = program_of(completion, fields.get("prompt"), entry)
        return run_check(code, fields["test"], entry, fields.get("prompt"), limits)
    if fields.get("tests") is not None:
        return run_io(extract_code(completion), fields["tests"], limits)
    raise ValueError("a code item needs test_list, test with entry_point, or tests ({input, output} pairs)")


def code_reward(
    completion: str,
    prompt: str | None = None,
    test_list: list[str] | None = None,
    test_setup: str | None = None,
    test_setup_code: str | None = None,
    test: str | None = None,
    entry_point: str | None = None,
    tests: list[dict[str, str]] | None = None,
) -> float:
    """The share of the row's tests the completion passes, as a user reward (`reward.user: [{fn:
    rewards.code:code_reward}]` on the text task takes the row's fields by name)."""
    fields = {
        "prompt": prompt,
        "test_list": test_list,
        "test_setup": test_setup if test_setup is not None else test_setup_code,
        "test": test,
        "entry_point": entry_point,
        "tests": tests,
    }
    return run_tests(completion, fields).reward()


def program_text(completion: str) -> str:
    """A completion as the code task scores it: trailing space and leading blank lines go; the first
    line's indentation stays (a function body continuing its prompt)."""
    return re.sub(r"\A(?:[ \t]*\r?\n)+", "", completion.rstrip())


class TestsPassed(RewardComponent):
    """`tests`: the share of the item's tests the program passes (1/0 with all_or_nothing).

    Reports `passed` and `total` (tests), and `sandbox_<status>` = 1 for the run's status. Status
    `ok` when the program ran to its end, `invalid` (a usable 0) when it failed or hit a limit; a
    program the sandbox could not run raises `SandboxFailure` (the item's status is then `error`).
    """

    name = "tests"
    reports = ("passed", "total")
    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, all_or_nothing: bool = False, limits: Any = None):
        self.all_or_nothing, self.limits = all_or_nothing, limits
        self._memo: OrderedDict[tuple[str, str], CodeOutcome] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        return {"all_or_nothing": self.all_or_nothing, "limits": self.limits}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["all_or_nothing"], state["limits"])

    def outcome(self, program: str, fields: Mapping[str, Any]) -> CodeOutcome:
        """run_tests, remembered: a group's equal completions run once (a run that ended in time
        repeats; one cut by a limit may not, so it is not kept)."""
        key = (program, json.dumps(fields, sort_keys=True, default=str))
        found = self._memo.get(key)
        if found is not None:
            self._memo.move_to_end(key)
            return found
        outcome = run_tests(program, fields, self.limits)
        if outcome.status in _REPEATABLE:
            self._memo[key] = outcome
            if len(self._memo) > _MEMO_SIZE:
                self._memo.popitem(last=False)
        return outcome

    def judge(self, completion: str, target: Any, fields: Fields) -> Part:
        outcome = self.outcome(completion, fields or {})
        components = {
            "passed": float(outcome.passed),
            "total": float(outcome.total),
            f"sandbox_{outcome.status}": 1.0,
        }
        status = OK if outcome.status == SANDBOX_OK else INVALID
        return Part(components, outcome.reward(self.all_or_nothing), status)


class CodeScorer(Scorer):
    """The code task's scorer: each program run against its item's tests in the sandbox
    (`TestsPassed`), plus the user rewards."""

    def __init__(self, config: RewardConfig | None = None, all_or_nothing: bool = False, limits: Any = None):
        self.tests = TestsPassed(all_or_nothing, limits)
        super().__init__([(self.tests, 1.0)], config, clean=program_text, data_source="code")

    @property
    def all_or_nothing(self) -> bool:
        return self.tests.all_or_nothing

    @property
    def limits(self) -> Any:
        """The sandbox's limits for one run (`rewards.sandbox.SandboxLimits`; None: its defaults)."""
        return self.tests.limits
