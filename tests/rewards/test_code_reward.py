"""The `code` reward: the program taken from a completion, the three test shapes, the reward and its
statuses (a faked sandbox for the mapping; the real one, where it works, for whole programs)."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pytest

from rewards import ERROR, INVALID, OK
from rewards import code as code_reward_module
from rewards.code import (
    CodeOutcome,
    CodeScorer,
    code_reward,
    extract_code,
    program_of,
    run_tests,
    same_output,
)

ASSERTS = {"test_list": ["assert f(1) == 2", "assert f(2) == 4", "assert f(3) == 6"]}


def _sandbox_reason() -> str | None:
    try:
        from rewards.sandbox import sandbox_unavailable_reason
    except ImportError as exc:
        return f"rewards.sandbox cannot be imported: {exc}"
    return sandbox_unavailable_reason()


def test_the_program_is_the_first_python_block_or_the_whole_completion():
    assert extract_code("f = 1") == "f = 1"
    assert extract_code("Here:\n```python\nx = 1\n```\nand\n```python\ny = 2\n```") == "x = 1\n"
    assert extract_code("```py\nx = 1\n```") == "x = 1\n"
    assert extract_code("```text\nno\n```\n```python\nyes\n```") == "yes\n"
    assert extract_code("```\nbare\n```") == "bare\n"  # no block names a language
    assert extract_code("```python\nunclosed = 1") == "unclosed = 1"


def test_a_humaneval_body_continues_its_prompt_and_a_whole_function_stands_alone():
    head = "def add(a, b):\n    '''sum'''\n"
    assert program_of("    return a + b", head, "add") == head + "    return a + b"
    whole = "```python\ndef add(a, b):\n    return a + b\n```"
    assert program_of(whole, head, "add") == "def add(a, b):\n    return a + b\n"


def test_outputs_compare_line_by_line_without_trailing_space():
    assert same_output("3  \n4\n\n", "3\n4")
    assert not same_output("3\n5\n", "3\n4\n")


def test_reward_is_the_share_or_all_or_nothing_and_zero_when_the_run_ended_badly():
    assert CodeOutcome(2, 3, "ok").reward() == pytest.approx(2 / 3)
    assert CodeOutcome(2, 3, "ok").reward(all_or_nothing=True) == 0.0
    assert CodeOutcome(3, 3, "ok").reward(all_or_nothing=True) == 1.0
    for status in ("failed", "timeout", "memory", "killed", "output_limit"):
        assert CodeOutcome(3, 3, status).reward() == 0.0


def _fake_sandbox(monkeypatch, status: str, stdout: str = "") -> list[str]:
    sources: list[str] = []

    def run(source, stdin, limits):
        sources.append(source)
        return SimpleNamespace(status=status, stdout=stdout, stderr="", detail=f"{status} detail")

    monkeypatch.setattr(code_reward_module, "_run", run)
    return sources


@pytest.mark.parametrize("status", ["timeout", "memory", "killed", "failed", "output_limit"])
def test_a_run_that_ends_badly_is_a_usable_zero_with_its_status_kept(monkeypatch, status):
    _fake_sandbox(monkeypatch, status)
    result = CodeScorer().score("f = lambda x: 2 * x", None, ASSERTS)
    assert result.total == 0.0 and result.status == INVALID and result.usable
    assert result.components == {"passed": 0.0, "total": 3.0, f"sandbox_{status}": 1.0}


def test_a_sandbox_error_is_no_reward_at_all(monkeypatch):
    _fake_sandbox(monkeypatch, "sandbox_error")
    result = CodeScorer().score("f = lambda x: 2 * x", None, ASSERTS)
    assert result.status == ERROR and not result.usable and "sandbox" in result.reason


def test_a_count_line_without_the_runs_nonce_counts_nothing(monkeypatch):
    _fake_sandbox(monkeypatch, "ok", stdout="deadbeef 3\n")  # printed by the completion, not the harness
    result = CodeScorer().score("print('deadbeef 3')", None, ASSERTS)
    assert result.status == OK and result.total == 0.0 and result.components["passed"] == 0.0


def test_equal_completions_run_once_and_the_scorer_pickles_with_its_settings(monkeypatch):
    sources = _fake_sandbox(monkeypatch, "failed")
    scorer = CodeScorer(all_or_nothing=True, limits=("limits",))
    scorer.score_batch(["f = 1"] * 4, [None] * 4, [ASSERTS] * 4)
    assert len(sources) == 1
    again = pickle.loads(pickle.dumps(scorer))
    assert again.all_or_nothing is True and again.limits == ("limits",)


def test_fields_in_no_shape_are_refused():
    with pytest.raises(ValueError, match="test_list"):
        run_tests("x = 1", {"prompt": "p"})


# ------------------------------------------------------------------ through the real sandbox
real = pytest.mark.skipif(_sandbox_reason() is not None, reason=f"no sandbox here: {_sandbox_reason()}")


@real
@pytest.mark.parametrize(
    ("completion", "passed", "status"),
    [
        ("```python\ndef f(x):\n    return 2 * x\n```", 3, OK),  # correct
        ("f = lambda x: 2 if x == 1 else x * x", 2, OK),  # 2 of 3: f(3) is 9
        ("f = lambda x: x", 0, OK),  # wrong
        ("import os\nos._exit(0)", 0, OK),  # leaves before the tests: nothing counted
        ("raise SystemExit(0)", 0, INVALID),  # leaving while loading counts as the code failing
        ("import sys\nsys.exit(3)", 0, INVALID),  # the code itself fails
        ("def f(x)\n    return x", 0, INVALID),  # a syntax error
        ("while True:\n    pass", 0, INVALID),  # hangs: cut by the limit
    ],
)
def test_assert_lines_through_the_sandbox(completion, passed, status):
    from rewards.sandbox import SandboxLimits

    scorer = CodeScorer(limits=SandboxLimits(wall_s=2.0, cpu_s=2.0))
    result = scorer.score(completion, None, ASSERTS)
    assert result.status == status, result
    assert result.components["passed"] == passed and result.components["total"] == 3
    assert result.total == pytest.approx(passed / 3)
    if "while True" in completion:
        assert result.components == {"passed": 0.0, "total": 3.0, "sandbox_timeout": 1.0}


@real
@pytest.mark.parametrize("where", ["code", "test_setup", "test"])
def test_a_memory_error_at_the_limit_is_the_memory_status_wherever_it_is_raised(where):
    """The harness catches what the code raises (to report it in one line) but lets MemoryError
    through: the interpreter's own last line is how the sandbox tells `memory` from `failed`."""
    from rewards.code import run_asserts
    from rewards.sandbox import SandboxLimits

    huge = "b = bytearray(1 << 34)"  # 16 GiB: refused at once by the address-space limit
    code, setup, tests = "x = 1", "", ["assert True"]
    if where == "code":
        code = huge
    elif where == "test_setup":
        setup = huge
    else:
        tests = [huge, "assert True"]
    outcome = run_asserts(code, tests, setup=setup, limits=SandboxLimits(wall_s=10.0))
    assert (outcome.status, outcome.passed) == ("memory", 0), outcome
    assert "MemoryError" in outcome.detail


@real
def test_a_humaneval_check_and_stdin_pairs_through_the_sandbox():
    head = "def add(a, b):\n    '''a + b'''\n"
    check = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n"
    fields = {"test": check, "entry_point": "add", "prompt": head}
    assert code_reward("    return a + b", **fields) == 1.0
    assert code_reward("    return a - b", **fields) == 0.0
    scored = CodeScorer().score("\n    return a + b\n", None, fields)  # the body keeps its indentation
    assert scored.total == 1.0 and scored.status == OK

    pairs = {"tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}]}
    summing = "a, b = map(int, input().split())\nprint(a + b)"
    assert code_reward(summing, **pairs) == 1.0
    assert code_reward("print(3)", **pairs) == 0.5
    crashing = CodeScorer().score("print(1 / 0)", None, pairs)
    assert crashing.total == 0.0 and crashing.components["sandbox_failed"] == 1.0
