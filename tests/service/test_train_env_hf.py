"""The bundled `python-tool` and `chess-play` environments end to end through `hf-smoke`'s tiny
transformers model with a chat template: episodes on the reward pool, code run in the sandbox,
moves answered by Stockfish, the answers entering as user messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.run_files import read_jsonl
from tests.service.train_child import assert_ran, run_train, shared_env


def _sandbox_reason() -> str | None:
    from rewards.sandbox import sandbox_unavailable_reason

    return sandbox_unavailable_reason()


def _engine_reason() -> str | None:
    from rewards.engine import EngineUnavailable, find_engine

    try:
        find_engine(None)
    except EngineUnavailable as exc:
        return str(exc)
    return None


def _run(run_dir: Path, env: str, *sets: str) -> list[dict]:
    sets = ("task.name=env", f"task.env={env}", "task.chat_template=true", "run.backend=local", *sets)
    assert_ran(run_train("--preset", "hf-smoke", "--run-dir", str(run_dir), sets=sets, env=shared_env()))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded" and (run_dir / "export").is_dir()
    grpo = [m for m in read_jsonl(run_dir / "metrics.jsonl") if m["phase"] == "grpo"]
    assert grpo and all(m["env_errors"] == 0.0 and m["completions"] == 16 for m in grpo)
    return read_jsonl(run_dir / "eval.jsonl")


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.skipif(_sandbox_reason() is not None, reason=f"no sandbox here: {_sandbox_reason()}")
def test_python_tool_runs_the_policys_code_and_hands_back_its_output(tmp_path):
    evals = _run(
        tmp_path / "run", "python-tool", "sampling.max_new_tokens=140", "sft.steps=150", "sft.lr=0.005"
    )
    final = evals[-1]
    assert final["turns_mean"] > 1.0, "no episode ran code and went on: the run showed nothing"
    ran = [s for s in final["samples"] if "<output>" in s["completion"]]
    assert ran and all("</output>" in s["completion"] for s in ran)
    # each run of code is in its turn's info, with the sandbox's status
    assert all(any(i.get("tool") == "python" and i.get("status") for i in s["env_info"]) for s in ran), ran


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.skipif(_engine_reason() is not None, reason=f"no engine here: {_engine_reason()}")
def test_chess_play_answers_legal_moves_with_the_engines(tmp_path):
    evals = _run(
        tmp_path / "run", "tests.service.env_cases:QuickChess", "sampling.max_new_tokens=80", "sft.steps=100",
        "sft.lr=0.005", "run.eval_samples=16",  # every held-out episode's sample, with its turns' infos
    )  # fmt: skip
    for e in evals:
        assert e["statuses"] and set(e["statuses"]) <= {"ok", "max_tokens"} and 0.0 <= e["reward_mean"] <= 1.0
    assert max(e["success_rate"] for e in evals) > 0.0, "no legal move was played: the run showed nothing"
    infos = [i for e in evals for s in e["samples"] for i in s.get("env_info", [])]
    assert any("cp_loss" in i for i in infos)  # a legal move's judgement, as the environment reported it
    assert all({"move", "best", "cp_loss"} <= i.keys() or i.keys() == {"illegal"} for i in infos), infos


@pytest.mark.e2e
@pytest.mark.slow
def test_a_skyrl_gym_environment_runs_unchanged(tmp_path):
    pytest.importorskip("skyrl_gym")
    rows = tmp_path / "gsm8k.jsonl"
    rows.write_text(
        "".join(
            json.dumps({
                "prompt": [{"role": "user", "content": f"What is {a} + {b}? End with '#### N'."}],
                "env_class": "gsm8k_multi_turn",
                "reward_spec": {"method": "rule", "ground_truth": str(a + b)},
                "extra_info": {"max_turns": 2},
            }) + "\n"
            for a in range(1, 7) for b in range(1, 7)
        )
    )  # fmt: skip
    evals = _run(
        tmp_path / "run", "skyrl_gym.envs.gsm8k.multi_turn_env:GSM8kMultiTurnEnv", f"task.path={rows}",
        "sft.steps=0", "sampling.max_new_tokens=190", "data.eval_size=8", "run.eval_samples=8",
    )  # fmt: skip
    assert all(e["count"] == 8 and "env_error" not in e["statuses"] for e in evals)
    # SkyRL's get_metrics at each episode's end: the turns its environment counted (0 when cut first)
    steps = [s["env_episode_info"]["steps"] for e in evals for s in e["samples"] if "env_episode_info" in s]
    assert steps and all(0 <= n <= 2 for n in steps), steps
    grpo = [m for m in read_jsonl(tmp_path / "run" / "metrics.jsonl") if m["phase"] == "grpo"]
    # sampled episodes went past their first turn: the environment's user message was fed back
    assert max(m["turns_mean"] for m in grpo) > 1.0, "no episode got a SkyRL answer: the run showed nothing"
    # get_metrics' dicts of each step, through GSM8kMultiTurnEnv's own aggregate_metrics (avg_steps)
    assert all(0.0 <= m["env_metrics"]["avg_steps"] <= 2.0 for m in grpo) and all(
        set(m["env_metrics"]) == {"avg_steps"} for m in grpo
    )
