"""The env task before any run: what it refuses (one line, exit 2, no run directory), its pairs,
and `python -m service.check_reward` trying an environment."""

from __future__ import annotations

import re

import pytest

from service.check_reward import main as check_main
from service.config import load_config
from service.tasks import build_task
from tests.service.refusals import refused

CASES = "tests.service.env_cases"


def _refused(capsys, tmp_path, *sets: str) -> str:
    return refused(capsys, tmp_path, "env-smoke", *sets)


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (
            ["task.env=nope"],
            "task.env 'nope': name a bundled environment (chess-play, guess, python-tool) or 'module:Class'",
        ),
        (["task.env=no_such_module:Env"], "cannot import module 'no_such_module'"),
        ([f"task.env={CASES}:NotAnEnvironment"], "NotAnEnvironment has no reset or step method"),
        (["task.max_turns=0"], "task.max_turns"),
        (["model.block_size=32"], "exceeds model.block_size (32)"),
        ([f"task.env={CASES}:ResetRaises"], "cannot start: reset raised KeyError"),
        ([f"task.env={CASES}:NoDemonstration"], "sft.steps: 6, but task.env"),
        (
            [f"task.env={CASES}:StepRaises"],
            "the demonstration of row {'secret': 10} ended env_error: step raised",  # a training row
        ),
        ([f"task.env={CASES}:LiesAboutDeterminism"], "task.env: declared deterministic, but row"),
        (
            [f"task.env={CASES}:AggregatesBadly"],
            "task.env: aggregate_metrics failed on the 8 sample episodes' infos: KeyError: 'solved'",
        ),
        (["task.stop=[]"], "task.stop"),
    ],
)
def test_an_env_run_is_refused_before_anything_starts(capsys, tmp_path, sets, expected):
    assert expected in _refused(capsys, tmp_path, *sets)


@pytest.fixture
def played(monkeypatch) -> list[dict]:
    """The rows whose demonstration the bundled `guess` environment plays from now on."""
    from rewards.env.guess import GuessNumber

    rows: list[dict] = []
    demonstration = GuessNumber.demonstration.__func__
    monkeypatch.setattr(
        GuessNumber,
        "demonstration",
        classmethod(lambda cls, row, rng: rows.append(dict(row)) or demonstration(cls, row, rng)),
    )
    return rows


def test_a_class_that_does_not_derive_from_environment_is_refused_in_one_line(capsys, tmp_path):
    line = _refused(capsys, tmp_path, f"task.env={CASES}:DuckTyped")
    assert f"task.env '{CASES}:DuckTyped': DuckTyped does not derive from rewards.env.Environment" in line
    assert check_main(["--preset", "env-smoke", "--set", f"task.env={CASES}:DuckTyped"]) == 2
    assert "does not derive from rewards.env.Environment" in capsys.readouterr().err


def test_a_hanging_environment_refuses_the_run_in_one_line_after_one_step_deadline(capsys, tmp_path):
    hangs = [f"task.env={CASES}:HangsOnItsSecondTurn", "task.step_timeout_s=1"]
    line = _refused(capsys, tmp_path, *hangs)  # its demonstrations, played before anything starts
    assert "the demonstration of row" in line and "ended timeout: step took over 1s without returning" in line
    assert check_main(["--preset", "env-smoke", *(a for s in hangs for a in ("--set", s))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ended timeout: step took over 1s without returning" in err


def test_check_reward_stops_trying_an_environment_at_its_first_hanging_step(capsys):
    sets = ["sft.steps=0", f"task.env={CASES}:HangsWithoutDemonstration", "task.step_timeout_s=1"]
    assert check_main(["--preset", "env-smoke", "--n", "4", *(a for s in sets for a in ("--set", s))]) == 2
    out = capsys.readouterr().out
    assert "sample:       1 of 4 rows: stopped at row {'secret': 10}, past task.step_timeout_s" in out
    assert "statuses:     timeout 1" in out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict:"))
    assert "refused: row {'secret': 10} ended timeout: step took over 1s without returning" in verdict


def test_env_pairs_are_the_first_observation_and_a_demonstration_played_through():
    task = build_task(load_config("env-smoke"))
    pair = task.train_stream(None)(0)
    assert pair.prompt == "guess 1-16\n" and pair.turns
    assert pair.target == "".join(a + o for a, o in pair.turns)
    assert all(a.endswith("\n") for a, _ in pair.turns) and pair.turns[-1][1] == ""  # found: no answer
    assert task.train_stream(None)(0) == pair  # a pure function of the index
    held = task.eval_pairs()
    assert len(held) == 8 and all(p.prompt == "guess 1-16\n" for p in held)
    assert all(p.target is None and p.turns is None for p in held)  # evaluation plays them itself
    assert set(task.alphabet) >= set("0123456789\nhigherlower")


def test_only_training_rows_play_their_demonstrations_and_the_trial_reuses_them(played):
    task = build_task(load_config("env-smoke"))
    first = [task.train_stream(None)(i).fields for i in range(64)]
    assert played[:64] == first and len(played) == 128  # the sample built, then the stream here
    played.clear()
    assert task.environment_problem() is None and played == []  # tried on the sample's rows
    assert task.environment_trial(70).episodes == 2 * 70 and len(played) == 6  # past it: the stream


def test_grpo_steps_get_the_same_rows_without_playing_their_demonstrations(played):
    task = build_task(load_config("env-smoke"))
    train, grpo = task.train_stream(None), task.grpo_stream(None)
    played.clear()  # the task's sample, built above
    for i in (0, 5, 1 << 40):  # dynamic sampling's refills come from far along the stream
        pair = grpo(i)
        assert played == [] and pair.target is None and pair.turns is None
        full = train(i)
        assert (pair.prompt, pair.fields) == (full.prompt, full.fields) and full.turns
        played.clear()


def test_the_checks_before_an_hf_run_play_no_demonstration_past_the_sample(played):
    from service.model_checks import TRAIN_PROMPTS_CHECKED, run_rows

    task = build_task(load_config("env-smoke"))
    played.clear()  # the task's sample, built above
    rows = run_rows(task, task.eval_pairs(), None)
    assert played == []  # the sample's demonstrations are reused; the rows past it are prompts only
    training = [r for r in rows if r.split == "training"]
    assert len(training) == TRAIN_PROMPTS_CHECKED
    sample = task.train_sample
    assert [(r.prompt, r.target) for r in training[: len(sample)]] == [(p.prompt, p.target) for p in sample]
    assert all(r.target is None for r in training[len(sample) :])
    grpo = task.grpo_stream(None)
    assert [r.prompt for r in training] == [grpo(i).prompt for i in range(TRAIN_PROMPTS_CHECKED)]


def test_check_reward_tries_the_environment(capsys):
    assert check_main(["--preset", "env-smoke", "--n", "6"]) == 0
    out = capsys.readouterr().out
    assert "environment:  guess (task env), deterministic" in out
    assert "6 rows, each played twice" in out and "statuses:     ok 12" in out
    # each episode's `guesses` (episode_info), as a run's env_metrics would average them
    assert re.search(r"env metrics:  guesses mean [\d.]+ in \[\d+, \d+\] \(12 episodes\)", out), out
    assert "determinism:  0 of 6 rows" in out and "a run would accept this environment" in out
    lies = f"task.env={CASES}:LiesAboutDeterminism"
    assert check_main(["--preset", "env-smoke", "--set", lies, "--n", "8"]) == 2
    out = capsys.readouterr().out
    assert "determinism:  8 of 8 rows played differently" in out  # the first 8 training rows
    assert "verdict:      refused: declared deterministic, but row" in out


def test_an_environments_own_aggregate_reaches_both_episode_hosts_and_check_reward(capsys):
    for hosting in ("pool", "local"):
        sets = [f"task.env={CASES}:AggregatesGuesses", f"task.hosting={hosting}"]
        host = build_task(load_config("env-smoke", overrides=sets)).episode_host(pool_of=lambda: None)
        assert host.aggregate_metrics([{"guesses": 2}, {"guesses": 5}]) == {"episodes": 2, "most_guesses": 5}
    assert (
        check_main(["--preset", "env-smoke", "--set", f"task.env={CASES}:AggregatesGuesses", "--n", "3"]) == 0
    )
    out = capsys.readouterr().out
    assert re.search(r"aggregated:   episodes 6, most_guesses \d \(the class's aggregate_metrics", out), out
