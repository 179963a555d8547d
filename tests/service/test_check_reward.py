"""`python -m service.check_reward`: cost, statuses, determinism and the pool, on the run's own data."""

from __future__ import annotations

import re

import pytest

from service.check_reward import main

EX = "examples.rewards.misbehaving"


def _check(capsys, *sets: str, n: int = 8) -> tuple[int, str]:
    argv = ["--preset", "smoke", "--n", str(n)]
    for item in sets:
        argv += ["--set", item]
    code = main(argv)
    return code, capsys.readouterr().out


def _reward(name: str) -> str:
    return f"reward.user=[{{fn: '{EX}:{name}'}}]"


def test_the_bundled_reward(capsys):
    code, out = _check(capsys)
    assert code == 0 and "sample:       8 of 8 items, each scored 2x" in out
    assert "0 of 8 items scored differently" in out and "verdict:      a run would accept" in out
    assert re.search(r"statuses:     .*ok 2", out)  # the targets; the other completions are not FENs
    assert "pool:         1 workers x 0.5 CPU" in out and "a GRPO step:  16 items" in out
    assert "components:   validity mean 0.25 in [0, 1] (8 items)" in out and "note:" not in out


def test_a_slow_reward_is_measured_and_its_calls_sized(capsys):
    code, out = _check(capsys, _reward("slow"), "pool.chunk_timeout_s=1", "pool.collect_timeout_s=600", n=2)
    assert code == 0
    p50 = float(re.search(r"p50 ([\d.]+) ms", out).group(1))
    assert p50 >= 200  # 0.2 s an item
    assert "calls:        at most 1 items (configured 2048)" in out


@pytest.mark.parametrize(
    ("name", "code", "expected"),
    [
        ("always_raises", 2, "refused: reward.user: every one of 8 sample items failed"),
        ("not_a_number", 2, "refused: reward.user: user reward"),
        ("noisy", 0, "8 of 8 items scored differently the second time (NOT deterministic)"),
        ("raises_one_in_six", 0, "error x"),
        ("constant", 0, f"note: {EX}:constant gives every sampled item 0.5: it adds nothing GRPO can learn"),
    ],
)
def test_misbehaving_rewards(capsys, name, code, expected):
    got, out = _check(capsys, _reward(name))
    assert got == code and expected in out, out


def test_a_bad_config_is_one_line(capsys):
    assert main(["--set", "pool.num_workers=0"]) == 2
    assert capsys.readouterr().err.startswith("config error: pool.num_workers")


def test_nan_on_a_third_of_items_is_refused_with_the_runs_numbers(capsys):
    from actors.pool.failure_policy import BatchCounts, error_rate_problem
    from service.preflight import PREFLIGHT_RATE_ITEMS

    # The preflight's larger sample: the same items, so the same figures as its refusal.
    code, out = _check(capsys, _reward("nan_one_in_three"), n=PREFLIGHT_RATE_ITEMS)
    failed = int(re.search(r"failed:       (\d+) of 64 items", out).group(1))
    the_rule = error_rate_problem(BatchCounts(64, errors=failed), 0.25)  # what a GRPO step would say
    assert code == 2 and the_rule is not None and failed > 16, out
    verdict = out.splitlines()[-1]
    assert verdict.startswith("verdict:      refused: reward: ") and the_rule in verdict, verdict
    assert "returned non-finite nan" in verdict and "groups of 4 would be dropped" in out


def test_a_reward_that_never_returns_is_named_and_nothing_unmeasured_is_printed(capsys):
    sets = [
        "--set",
        "reward.user=[{fn: 'examples.rewards.misbehaving:slow'}]",
        "--set",
        "pool.chunk_timeout_s=0.05",
    ]
    assert main(["--preset", "smoke", "--n", "4", *sets]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("sample:       stopped at sample item 1 (completion ")
    assert not any(line.startswith(("cost/item:", "statuses:", "failed:", "determinism:")) for line in out)
    assert "did not return within 0.05s" in out[-1] and out[-1].startswith("verdict:      refused: ")
