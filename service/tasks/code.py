"""The `code` task: a prompt -> a program, run against the row's tests in the sandbox.

    task: {name: code, path: problems.jsonl, eval_path: held_out.jsonl, all_or_nothing: false}
    task: {name: code, train_problems: 2000}     # no path: the bundled integer-function problems

- Rows (`service.tasks.code_data`): a prompt, an optional target (the SFT answer) and one test
  shape: assert lines (`test_list`, optional `test_setup`), a HumanEval `test` with `entry_point`,
  or stdin/stdout pairs (`tests`). A bad row is refused before the run as "file:line: reason".
  Held-out rows come from `eval_path`, or `data.eval_size` prompts split off `path` (`data.eval_seed`);
  without a path, both sets are generated (`data.eval_seed`, then `data.seed`, disjoint prompts).
- Reward (`rewards.code.CodeScorer`): the share of tests passed (all-or-nothing with
  `task.all_or_nothing`), components `passed`, `total` and `sandbox_<status>`; a run that failed or
  hit a limit scores 0 (status `invalid`), one the sandbox could not run is an `error`.
- Held-out figures: `greedy_pass_at_1` (greedy completions passing every test), `tests_passed_mean`,
  `sandbox_<status>_rate`; with `grpo.eval_k`, pass@1 and pass@k of sampled completions.
- Without a working sandbox (`rewards.sandbox.sandbox_unavailable_reason()`), the task refuses to
  start: completions never run any other way.

Everything else (the stream, the alphabet, what travels to the workers) is the text task's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from rewards import OK
from rewards.code import CodeScorer
from service.preflight.data import FitLimits, check_records
from service.tasks.base import RunSections, check_reward_fields
from service.tasks.code_data import generated_rows, load_code_rows
from service.tasks.text import TextData, TextTask, TextTaskConfig, _check_sft_targets
from trainer.data.pairs import DataFileError, FieldPair
from trainer.data.text_rows import TextRow, split_held_out, without_prompts

INSTALL_HINT = "apt-get install bubblewrap"


def sandbox_problem(process_limit: str = "auto") -> str | None:
    """Why completions cannot run here (one line, naming the fix), or None when the sandbox works
    with `process_limit` (`task.process_limit`)."""
    try:
        from rewards.sandbox import sandbox_unavailable_reason
    except ImportError as exc:
        reason = f"rewards.sandbox cannot be imported ({exc})"
    else:
        reason = sandbox_unavailable_reason(process_limit)
    if reason is None:
        return None
    return f"task.name: code runs completions in the sandbox, which is unavailable here: {reason}; {INSTALL_HINT}"


class CodeTaskConfig(TextTaskConfig):
    """`name: code`: a prompt -> a program, run against the row's tests in the sandbox."""

    name: Literal["code"] = Field("code", description="code: a program, run against tests in the sandbox")
    path: str | None = Field(
        None,
        description="JSONL file of problems (prompt, optional target, and test_list, test with entry_point, "
        "or tests); unset: the bundled integer-function problems",
    )
    target_key: str = Field(
        "target",
        min_length=1,
        description="the row key holding the SFT answer, a program (optional in a row)",
    )
    all_or_nothing: bool = Field(
        False, description="reward 1 only when every test passes (else 0); false: the share of tests passed"
    )
    train_problems: int = Field(
        2000, ge=1, description="bundled problems (no path): distinct training problems generated (data.seed)"
    )
    time_limit_s: float = Field(
        5.0, gt=0.0, description="wall-clock and CPU seconds of one sandboxed run (past it: status timeout)"
    )
    memory_mb: int = Field(512, ge=16, description="memory of one sandboxed run (past it: status memory)")
    process_limit: Literal["auto", "cgroup_v1", "cgroup_v2", "uid"] = Field(
        "auto",
        description="how a sandboxed run's processes are capped: cgroup_v2 (a delegated v2 subtree), cgroup_v1 "
        "(the v1 pids controller), uid (RLIMIT_NPROC on a uid of the sandbox's own: no writable cgroup needed); "
        "auto: the first of these that works on the reward worker's host",
    )


@dataclass(frozen=True)
class CodeTask(TextTask):
    config_class = CodeTaskConfig
    checked_at_submit = False  # the sandbox is the cluster's: the submitting machine may lack it

    @classmethod
    def check_config(cls, cfg: RunSections) -> str | None:
        t = cfg.task
        if t.eval_path and not t.path:
            return "task.eval_path: held-out rows need training rows too (task.path); unset both to generate problems"
        if t.target_key == t.prompt_key:
            return f"task.target_key: {t.target_key!r} is task.prompt_key too; the target needs its own key"
        return None

    @classmethod
    def from_config(cls, cfg: RunSections) -> CodeTask:
        """The problems, checked; ValueError (one line) without a sandbox or with a bad row."""
        t = cfg.task
        problem = sandbox_problem(t.process_limit)
        if problem:
            raise ValueError(problem)
        from rewards.sandbox import SandboxLimits

        limits = SandboxLimits(
            wall_s=t.time_limit_s, cpu_s=t.time_limit_s, memory_mb=t.memory_mb, process_limit=t.process_limit
        )
        scorer = CodeScorer(cfg.reward, t.all_or_nothing, limits)
        train, held, note = _rows(cfg)
        _check_sft_targets(cfg, train)
        fit = FitLimits.of(cfg)
        source = "task.path" if t.path else "task.train_problems"
        check_records(source, ((r.where, r.prompt, r.target) for r in train), fit, None, train=True)
        held_key = "task.eval_path" if t.eval_path else source
        check_records(held_key, ((r.where, r.prompt, r.target) for r in held), fit, None, train=False)
        _check_fields(scorer, [*train, *held])
        from rewards.sandbox.process_limit import resolve

        capped = f"sandbox: each run's processes capped by {resolve(t.process_limit)[0]} (task.process_limit: {t.process_limit})"
        data = TextData([_pair(r) for r in train], [_pair(r) for r in held], scorer, [note, capped])
        chars = {c for r in (*train, *held) for c in r.prompt + (r.target or "")}
        chars.update(c for s in t.stop for c in s)
        return cls(seed=cfg.data.seed, chars="".join(sorted(chars)), stops=tuple(t.stop), data=data)

    def eval_metrics(self, scored: Sequence[Any]) -> dict[str, float]:
        return code_figures(scored)


def _rows(cfg: RunSections) -> tuple[list[TextRow], list[TextRow], str]:
    """(training rows, held-out rows, the line to log) from the files or the generator."""
    t, d = cfg.task, cfg.data
    if not t.path:
        held = generated_rows(d.eval_seed, d.eval_size, label="held-out")
        train = generated_rows(d.seed, t.train_problems, {r.prompt for r in held}, label="training")
        return train, held, f"[data] {len(train)} generated training problems; {len(held)} held-out ones"
    rows = _load(t.path, "task.path", t.prompt_key, t.target_key)
    if t.eval_path:
        held = _load(t.eval_path, "task.eval_path", t.prompt_key, t.target_key)
        train = without_prompts(rows, {r.prompt for r in held})
        if not train:
            raise ValueError(f"task.path: every prompt of {t.path} is also in task.eval_path {t.eval_path}")
        where = f"{t.eval_path}: {len(held)} held-out rows"
    else:
        try:
            train, held = split_held_out(rows, d.eval_size, d.eval_seed)
        except ValueError as exc:
            raise ValueError(f"data.eval_size: {d.eval_size} is too large for {t.path}: {exc}") from None
        where = f"{len(held)} held-out rows split off it (data.eval_size, data.eval_seed)"
    return train, held, f"[data] {t.path}: {len(train)} training rows; {where}"


def _load(path: str, key: str, prompt_key: str, target_key: str) -> list[TextRow]:
    try:
        return load_code_rows(path, prompt_key, target_key)
    except DataFileError as exc:
        raise ValueError(f"{key}: {exc}") from None


def _check_fields(scorer: CodeScorer, rows: Sequence[TextRow]) -> None:
    """Refuse a user reward that takes a field (or the target) some row lacks."""

    def lacking(name: str) -> str | None:
        for r in rows:
            if (r.target is None) if name == "target" else (name != "prompt" and name not in r.fields):
                return r.where
        return None

    check_reward_fields(scorer, lacking)


def _pair(row: TextRow) -> FieldPair:
    return FieldPair(row.prompt, row.target, {"prompt": row.prompt, **row.fields})


def code_figures(scored: Sequence[Any]) -> dict[str, float]:
    """Held-out figures of scored programs: greedy_pass_at_1 (every test passed), tests_passed_mean
    (the mean share of tests passed, a failed run counting 0) and sandbox_<status>_rate."""
    n = len(scored)
    if n == 0:
        return {}
    shares, passed_all, statuses = [], 0, Counter()
    for r in scored:
        comps = r.components
        total, passed = comps.get("total", 0.0), comps.get("passed", 0.0)
        ran = r.status == OK and total > 0
        shares.append(passed / total if ran else 0.0)
        passed_all += ran and passed == total
        statuses[next((k for k in comps if k.startswith("sandbox_")), "sandbox_none")] += 1
    out = {"greedy_pass_at_1": passed_all / n, "tests_passed_mean": sum(shares) / n}
    out.update({f"{status}_rate": count / n for status, count in sorted(statuses.items())})
    return out
