"""The addition task of docs/guides/adding-a-task.md: one module dropped into `service/tasks/` makes a
task the config, the registry, `--help-config` and a run know, scored through its own component.

Each test runs in a child process on a copy of `service/` holding the module as
`service/tasks/addition.py` (first on the path), so the checkout itself is never changed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service.train_child import child_env

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "addition"


@pytest.fixture
def with_task(tmp_path: Path) -> Path:
    """A folder holding a copy of `service/` with the example as one more task module."""
    shutil.copytree(REPO / "service", tmp_path / "service", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(EXAMPLE / "task.py", tmp_path / "service" / "tasks" / "addition.py")
    return tmp_path


def _child(folder: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = child_env(PYTHONPATH=str(REPO))  # the copy's service/ comes first: it is the working directory
    return subprocess.run(
        [sys.executable, *argv], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
    )


BUILD_AND_SCORE = f"""
import json, pickle
import service
from service.config import load_config
from service.tasks import TASKS, build_task
cfg = load_config("smoke", {str(EXAMPLE / "task.yaml")!r}, ["data.eval_size=40"])
task = build_task(cfg)
scorer = task.scorer()
held = task.eval_pairs()
stream = task.train_stream(None)
train = [stream(i) for i in range(2000)]
scored = [scorer.score(c, "132") for c in ("132", "122", "x")]
print(json.dumps({{
    "service": service.__file__,
    "tasks": list(TASKS),
    "task": [task.name, type(cfg.task).__name__, cfg.task.digits],
    "held": len(held),
    "overlap": len({{p.prompt for p in held}} & {{p.prompt for p in train}}),
    "sums_right": all(str(eval(p.prompt[:-1])) == p.target for p in held + train),
    "scored": [[r.total, r.status, r.components] for r in scored],
    "figures": task.eval_metrics(scored),
    "pickles": pickle.loads(pickle.dumps(task)) == task,
}}))
"""


def test_one_module_makes_a_task_that_builds_and_scores_through_its_component(with_task):
    result = _child(with_task, "-c", BUILD_AND_SCORE)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["service"].startswith(str(with_task))
    assert out["tasks"] == ["fen", "addition", "code", "env", "move", "text"]
    assert out["task"] == ["addition", "AdditionTaskConfig", 2]
    assert out["held"] == 40 and out["overlap"] == 0 and out["sums_right"]
    assert out["scored"] == [
        [1.0, "ok", {"digits_right": 1.0}],
        [0.5 * 2 / 3, "ok", {"digits_right": 2 / 3}],
        [0.0, "unparsable", {"digits_right": 0.0}],
    ]
    assert out["figures"] == {"digits_right_mean": (1.0 + 2 / 3) / 3}
    assert out["pickles"]


def test_its_keys_are_in_the_config_help_and_refused_with_one_line(with_task):
    shown = _child(with_task, "-m", "service.train", "--help-config", "task.digits")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[:2] == ["task.digits  (name: addition)", "    int >= 1, <= 9; default 2"]
    refused = _child(
        with_task, "-m", "service.train", "--config", str(EXAMPLE / "task.yaml"), "--set", "task.digits=1"
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "config error: data.eval_size: 200 is more than half of the 100 possible problems"
    ]


@pytest.mark.e2e
def test_a_few_steps_of_it_train_and_evaluate(with_task):
    sets = [
        "sft.steps=4", "sft.batch_size=16", "grpo.steps=2", "grpo.prompts_per_step=4", "grpo.eval_every=2",
        "grpo.eval_k=0", "sampling.group_size=4", "data.eval_size=8", "model.size=custom", "model.n_layer=1",
        "model.n_head=2", "model.n_embd=32", "checkpoint.every_steps=6", "run.backend=local",
    ]  # fmt: skip
    run_dir = with_task / "run"
    argv = ["-m", "service.train", "--config", str(EXAMPLE / "task.yaml"), "--run-dir", str(run_dir)]
    # 600 s: a guard against a hang, far above the few seconds the run takes
    result = _child(with_task, *argv, *(a for s in sets for a in ("--set", s)), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["steps"] == 6
    evals = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    assert evals[-1]["phase"] == "grpo" and 0.0 <= evals[-1]["digits_right_mean"] <= 1.0
    grpo = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
    assert set(grpo["reward_components"]) == {"digits_right"}
