"""Tests judged outside the graded program: its process answers probes, another one gives verdicts.

The program's side (`program_side`) runs the completion, then the test set-up, then evaluates each
probe it is sent (`f(2)`, with the values of any names the test bound) and prints the values in the
canonical plain form (`code_values.py`), after a per-run token. It never sees an expected value: those
stay in the tests, which run only in the judge (`judge_side`), a separate sandboxed process that never
ran the completion. The judge runs the set-up (and a HumanEval prompt and test), then each test with
its probes answered from the values the program gave; a probe it has no value for yet is recorded
(the next round asks the program for it) and the test is pending. Rounds alternate until no test is
pending, or `MAX_ROUNDS`. Tests that are exactly `assert PROBE == LITERAL` need no judge: the value is
compared here, as plain data.

Whatever the program does in its own process (replace `exec` or `print`, return an object equal to
everything, read its caller's frames, exit early, print fake results) it can only answer the
probes; a value that is not plain data, or no value at all, fails the test.
"""

from __future__ import annotations

import ast
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rewards.code_probes import PENDING, PROBE, bound_names, literal_comparison, rewrite
from rewards.code_values import VALUES_SOURCE, decoded

SANDBOX_OK = "ok"
MAX_ROUNDS = 4  # judge runs per item: enough for probes whose inputs depend on other probes' values
MAX_NEW_PROBES = 2000  # probes one judge run may ask for

_PROGRAM_SIDE = """\
import json as _json, sys as _sys
_g = {{"__name__": "__main__"}}
try:
    exec(compile({code!r}, "<completion>", "exec"), _g)
    exec(compile({setup!r}, "<test_setup>", "exec"), _g)
except MemoryError:
    raise  # the interpreter's own last line, "MemoryError", is how the sandbox tells `memory`
except BaseException as _e:
    print("the code raised " + type(_e).__name__ + ": " + str(_e)[:200], file=_sys.stderr)
    _sys.exit(1)
_values = {{}}
exec(compile({values!r}, "<values>", "exec"), _values)
_answers = []
for _source, _scope in {probes!r}:
    try:
        _names = dict(_values["decode"](_json.loads(_scope)))
        if {entry!r}:
            _names["candidate"] = _g[{entry!r}]
        _answers.append(_values["encode"](eval(compile(_source, "<probe>", "eval"), _g, _names)))
    except MemoryError:
        raise
    except BaseException as _e:
        _answers.append({{"x": type(_e).__name__}})
_sys.stdout.flush()
_sys.stdout.write("\\n" + {token!r} + _json.dumps(_answers) + "\\n")
_sys.stdout.flush()
"""

_JUDGE_SIDE = """\
import builtins as _builtins, json as _json, random as _random, sys as _sys
exec(compile({values!r}, "<values>", "exec"), globals())
class {pending}(BaseException):
    pass
class _Enough(BaseException):
    pass
_ANSWERS = {answers!r}
_new = []
def {probe}(source, scope):
    key = _json.dumps([source, _json.dumps(encode(scope), sort_keys=True)])
    if key in _ANSWERS:
        data = _json.loads(_ANSWERS[key])
        if type(data) is dict and set(data) == {{"x"}}:
            raised = getattr(_builtins, str(data["x"]), None)
            if isinstance(raised, type) and issubclass(raised, Exception):
                raise raised("raised by the program")
            raise RuntimeError(str(data["x"]))
        return decode(data)
    if key not in _new:
        _new.append(key)
        if len(_new) > {most}:
            raise _Enough()
    raise {pending}()
class _Candidate:
    def __call__(self, *args, **kwargs):
        return {probe}("candidate(*_a, **_k)", {{"_a": list(args), "_k": kwargs}})
_g = {{"__name__": "__main__", "{probe}": {probe}, "{pending}": {pending}}}
_verdicts = []
try:
    for _prelude in {preludes!r}:
        try:
            exec(compile(_prelude, "<prelude>", "exec"), _g)
        except Exception:
            pass
    for _i, _test in enumerate({tests!r}):
        _random.seed(_i)
        try:
            exec(compile(_test, "<test>", "exec"), _g)
            if {check!r}:
                _g["check"](_Candidate())
            _verdicts.append(1)
        except {pending}:
            _verdicts.append(-1)
        except (_Enough, MemoryError):
            raise
        except BaseException:
            _verdicts.append(0)
except _Enough:
    pass
_sys.stdout.write("\\n" + {token!r} + _json.dumps({{"verdicts": _verdicts, "new": _new}}) + "\\n")
"""


@dataclass(frozen=True)
class Plan:
    """What to judge: the tests (rewritten for the judge), the set-up, and how the program is reached."""

    tests: tuple[str, ...]  # as written
    setup: str  # run after the program, on its side, and before the tests in the judge
    preludes: tuple[str, ...]  # judge-only code run first (a HumanEval prompt and its test)
    check: bool  # each test defines check(candidate), called with the program's entry point
    entry: str  # the entry point's name (check shape), else ""


@dataclass(frozen=True)
class Verdict:
    passed: int
    status: str
    detail: str = ""


def _last_record(stdout: str, token: str) -> Any:
    for line in reversed(stdout.splitlines()):
        if line.startswith(token):
            try:
                return json.loads(line[len(token) :])
            except ValueError:
                return None
    return None


def probe_key(source: str, scope: dict) -> str:
    from rewards.code_values import encode

    return json.dumps([source, json.dumps(encode(scope), sort_keys=True)])


class Judge:
    """The rounds for one program against one plan; `run` is `(source, stdin, limits) -> result`."""

    def __init__(
        self, run: Callable[[str, str, Any], Any], limits: Any, checked: Callable[[Any], Any]
    ) -> None:
        self.run, self.limits, self.checked = run, limits, checked

    def ask_program(
        self, code: str, plan: Plan, keys: Sequence[str], answers: dict[str, str]
    ) -> Verdict | None:
        """Run the program's side for `keys`; their answers go into `answers`. A Verdict when the
        program did not end well (its status decides), else None."""
        token = secrets.token_hex(8) + " "
        probes = [tuple(json.loads(key)) for key in keys]
        source = _PROGRAM_SIDE.format(
            code=code, setup=plan.setup, values=VALUES_SOURCE, probes=probes, entry=plan.entry, token=token
        )
        result = self.checked(self.run(source, "", self.limits))
        if result.status != SANDBOX_OK:
            return Verdict(0, result.status, result.detail or result.stderr)
        values = _last_record(result.stdout, token)
        if isinstance(values, list) and len(values) == len(keys):
            answers.update({key: json.dumps(value) for key, value in zip(keys, values, strict=True)})
        return None

    def ask_judge(
        self, plan: Plan, tests: Sequence[str], answers: dict[str, str]
    ) -> tuple[list[int], list[str], Verdict | None]:
        """(verdicts: 1 passed, 0 failed, -1 pending; probes to ask for; a Verdict when the judge did not end well)."""
        token = secrets.token_hex(8) + " "
        source = _JUDGE_SIDE.format(
            values=VALUES_SOURCE, pending=PENDING, probe=PROBE, answers=answers, most=MAX_NEW_PROBES,
            preludes=list(plan.preludes) + [plan.setup], tests=list(tests), check=plan.check, token=token,
        )  # fmt: skip
        result = self.checked(self.run(source, "", self.limits))
        if result.status != SANDBOX_OK:
            return [], [], Verdict(0, result.status, result.detail or result.stderr)
        record = _last_record(result.stdout, token)
        if not isinstance(record, dict):
            return [], [], Verdict(0, result.status, "the judge gave no verdict")
        return list(record.get("verdicts", [])), list(record.get("new", [])), None

    def judge(self, code: str, plan: Plan) -> Verdict:
        setup_names = bound_names_of(plan.setup, *plan.preludes)
        if not plan.check and (verdict := self._literal_only(code, plan, setup_names)) is not None:
            return verdict
        try:
            recorded = [rewrite(t, setup_names, record=True).source for t in plan.tests]
            final = [rewrite(t, setup_names, record=False) for t in plan.tests]
        except SyntaxError as exc:
            return Verdict(0, SANDBOX_OK, f"a test does not parse: {exc}")
        answers: dict[str, str] = {}
        keys = [probe_key(source, {}) for t in final for source in t.static_probes]
        dynamic = plan.check or any(t.dynamic for t in final)
        if dynamic:  # the judge finds the probes' inputs first, running the tests with none answered
            _, keys, verdict = self.ask_judge(plan, recorded, answers)
            if verdict is not None:
                return verdict
        verdicts: list[int] = []
        for round_index in range(MAX_ROUNDS):
            keys = [key for key in dict.fromkeys(keys) if key not in answers]
            # The program runs at least once, probes or not: its own failure is the outcome.
            if (keys or round_index == 0) and (
                verdict := self.ask_program(code, plan, keys, answers)
            ) is not None:
                return verdict
            verdicts, keys, verdict = self.ask_judge(plan, [t.source for t in final], answers)
            if verdict is not None:
                return verdict
            if -1 not in verdicts or not keys:
                break
        return Verdict(sum(1 for v in verdicts if v == 1), SANDBOX_OK)

    def _literal_only(self, code: str, plan: Plan, setup_names: set[str]) -> Verdict | None:
        """Every test `assert PROBE == LITERAL`: one run of the program's side, compared here."""
        pairs = [literal_comparison(t, setup_names) for t in plan.tests]
        if not pairs or any(p is None for p in pairs):
            return None
        keys = [probe_key(source, {}) for source, _ in pairs]
        answers: dict[str, str] = {}
        if (verdict := self.ask_program(code, plan, list(dict.fromkeys(keys)), answers)) is not None:
            return verdict
        passed = 0
        for key, (_, expected) in zip(keys, pairs, strict=True):
            if key in answers:
                ok, value = decoded(json.loads(answers[key]))
                passed += ok and _equal(value, expected)
        return Verdict(passed, SANDBOX_OK)


def _equal(value: object, expected: object) -> bool:
    try:
        return bool(value == expected)
    except (RecursionError, MemoryError):
        return False


def bound_names_of(*sources: str) -> set[str]:
    names: set[str] = set()
    for source in sources:
        try:
            names |= bound_names(ast.parse(source))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return names
