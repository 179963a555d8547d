"""A whole `code` run whose every sandboxed program runs a hostile one: the run finishes, every
item gets its sandbox status in the records, and nothing is left outside.

The hostile programs (tests/rewards/sandbox/hostile_programs.py) are the rows' `test_setup`, so
they run inside the harness of every completion the policy writes (after the completion's own
code, which SFT makes `x = 1`), on the reward pool, during GRPO and at each evaluation: the same
sandbox, harness and pool path as a policy that writes them itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.run_files import read_jsonl
from tests.rewards.sandbox.hostile_programs import CORPUS, MARKER, SECRET, filled
from tests.service.train_child import REPO, assert_ran, child_env, run_train

PLACES = (Path("/tmp"), Path.home(), Path("/dev/shm"), REPO)


def _sandbox_reason() -> str | None:
    from rewards.sandbox import sandbox_unavailable_reason

    return sandbox_unavailable_reason()


def _rows(prefix: str) -> list[dict]:
    return [
        {
            "prompt": f"{prefix} {i}",
            "target": "x = 1",
            "test_list": ["assert True"],
            "test_setup": filled(src),
        }
        for i, (_, src, *_) in enumerate(CORPUS)
    ]


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.skipif(_sandbox_reason() is not None, reason=f"no sandbox here: {_sandbox_reason()}")
def test_a_run_whose_programs_are_hostile_finishes_and_counts_every_status(tmp_path):
    train = _write(tmp_path / "train.jsonl", _rows("train"))
    held = _write(tmp_path / "held.jsonl", _rows("held"))
    run_dir = tmp_path / "run"
    sets = [f"task.path={train}", f"task.eval_path={held}", f"data.eval_size={len(CORPUS)}",
            "task.time_limit_s=0.5", "grpo.steps=1", "grpo.eval_every=1", "grpo.eval_k=0",
            "run.backend=local", "sft.steps=300", "sft.lr=0.01"]  # fmt: skip
    env = child_env(RAY_AUTH_TOKEN=SECRET)  # in the worker's environment: no program may print it
    args = ("--preset", "code-smoke", "--run-dir", str(run_dir))
    result = assert_ran(run_train(*args, sets=sets, env=env, timeout=900))
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "succeeded"

    evals = read_jsonl(run_dir / "eval.jsonl")
    assert evals and all(e["count"] == len(CORPUS) for e in evals)
    for e in evals:
        rates = {
            k[len("sandbox_") : -len("_rate")]: v
            for k, v in e.items()
            if k.startswith("sandbox_") and k.endswith("_rate")
        }
        assert sum(rates.values()) == pytest.approx(1.0), rates  # every item has its status
        assert "sandbox_error" not in rates and "error" not in e["statuses"], e
        for status in ("timeout", "memory", "output_limit", "killed"):
            assert rates.get(status, 0.0) > 0, (status, rates)
        print(e["kind"], e.get("step"), {k: round(v * len(CORPUS)) for k, v in sorted(rates.items())})
    metrics = [m for m in read_jsonl(run_dir / "metrics.jsonl") if m["phase"] == "grpo"]
    assert len(metrics) == 1 and all(m.get("scorer_reward_errors", 0.0) == 0.0 for m in metrics)
    records = "".join(p.read_text(errors="replace") for p in run_dir.rglob("*.jsonl"))
    assert SECRET not in records + result.stdout + result.stderr
    assert not [p for place in PLACES for p in place.glob(f"*{MARKER}*")]
