"""Rewards written for TRL and verl, used unchanged: the style read from the signature, the calls
made as those trainers make them, and statuses for what they return (`rewards/styles.py`)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from rewards import ERROR, OK, SKIPPED, TIMEOUT, RewardConfig, RewardSpecError, UserRewardScorer
from rewards.concurrent import score_batch_concurrent
from rewards.styles import TOKEN_IDS
from trainer.data.pairs import TOKEN_IDS_FIELD

trl_rewards = pytest.importorskip("trl.rewards")
EX = "examples.rewards.trl_verl"
CHAT = [{"role": "user", "content": "abc"}]


def scorer(fn: str, **spec) -> UserRewardScorer:
    return UserRewardScorer(RewardConfig(user=[{"fn": fn, **spec}]))


def statuses(results) -> list[str]:
    return [r.status for r in results]


@pytest.mark.parametrize(
    ("fn", "style"),
    [
        (f"{EX}:reverse_reward", "trl"),
        (f"{EX}:compute_score", "verl"),
        ("trl.rewards:think_format_reward", "trl"),
        ("examples.addition.reward:addition_reward", "item"),
        ("Levenshtein:ratio", "item"),  # fn(s1, s2) is fn(completion, target), positionally
    ],
)
def test_auto_reads_the_style_from_the_signature(fn, style):
    assert scorer(fn).user_rewards[0].params.style == style


def test_trls_own_think_format_reward_runs_unchanged_on_chat_prompts():
    s = scorer("trl.rewards:think_format_reward")
    rows = [{"prompt": CHAT}] * 3
    got = s.score_batch(["<think>hm</think>42", "42", "<think>a"], [None] * 3, rows)
    assert statuses(got) == [OK, OK, OK] and [r.total for r in got] == [1.0, 0.0, 0.0]
    assert s.score("<think>x</think>y", None, {"prompt": CHAT}).total == 1.0  # one item: a list of one


def test_one_call_per_batch_with_lists_as_trl_gives_them():
    seen = []

    def spy(completions, prompts, trainer_state, log_extra, log_metric, a, **kwargs):
        seen.append((completions, prompts, trainer_state, a, sorted(kwargs)))
        log_extra("a", a)
        log_metric("batch", len(completions))
        return [float(x) for x in a]

    from rewards import register_reward, unregister_reward

    register_reward("spy", spy, replace=True)
    try:
        s = scorer("spy")
        rows = [{"prompt": f"p{i // 2}", "a": i, "b": -i} for i in range(4)]  # 2 prompts x 2 completions
        got = s.score_batch([" c0", "c1 ", "c2", "c3"], ["t0", "t1", "t2", "t3"], rows)
    finally:
        unregister_reward("spy")
    assert [r.total for r in got] == [0.0, 1.0, 2.0, 3.0] and statuses(got) == [OK] * 4
    assert seen == [(["c0", "c1", "c2", "c3"], ["p0", "p0", "p1", "p1"], None, [0, 1, 2, 3], ["b", "target"])]
    assert s.reward_log.counts == {"spy/log_extra/a": 1, "spy/log_metric/batch": 1}
    assert s.reward_log.take_metrics() == {"batch": (4.0, 1.0)}  # summed until taken, then gone
    assert s.reward_log.take_metrics() == {}
    assert [r.info for r in got] == [{"log_extra": {"a": i}} for i in range(4)]  # each item its own


def _logging_extras(completions, log_extra, **kwargs):
    log_extra("length", [len(c) for c in completions])
    log_extra("short", ["x"])  # not one value per item: cannot be aligned, left out
    log_extra("odd", [object, float("inf"), torch.tensor(2), "t" * 2000][: len(completions)])
    return [1.0] * len(completions)


async def _logging_extras_async(completions, log_extra, **kwargs):
    return _logging_extras(completions, log_extra)


@pytest.mark.parametrize("fn", [_logging_extras, _logging_extras_async])
def test_log_extra_values_reach_the_items_they_were_logged_for(fn):
    from rewards import register_reward, unregister_reward

    register_reward("extras", fn, replace=True)
    try:
        s = scorer("extras")
        completions = ["ab", 7, "abcd", "a"]  # the second is bad input: the call never sees it
        if fn is _logging_extras:
            got = s.score_batch(completions, [None] * 4)
        else:
            got = asyncio.run(
                score_batch_concurrent(s, completions, [None] * 4, None, concurrency=2, item_timeout_s=5)
            )
    finally:
        unregister_reward("extras")
    assert [r.status for r in got] == [OK, "bad_input", OK, OK]
    infos = [r.info for r in got]
    assert infos[1] is None
    assert infos[0] == {"log_extra": {"length": 2, "odd": str(object)}}
    assert infos[2] == {"log_extra": {"length": 4, "odd": None}}  # not finite: null
    assert infos[3]["log_extra"]["length"] == 1 and infos[3]["log_extra"]["odd"] == 2  # a tensor's number


def test_log_metric_keeps_finite_numbers_by_name():
    import numpy as np
    import torch

    from rewards.reward_log import RewardLog

    log = RewardLog()
    _, log_metric = log.trl_callables("fn")
    for value in (1, np.float32(0.5), torch.tensor(2.5), True, float("nan"), "high", [1.0]):
        log_metric("m", value)
    log_metric(3, 1.0)  # a name that is not text: counted, not reported
    assert log.take_metrics() == {"m": (5.0, 4.0)}
    assert log.counts["fn/log_metric/m"] == 7


def test_none_marks_an_item_skipped_never_a_zero():
    s = scorer(f"{EX}:judged_reward")
    rows = [{"prompt": "?maybe"}, {"prompt": "sure"}, {"prompt": "?no"}]
    got = s.score_batch(["abcde", "abcde", "x"], [None] * 3, rows)
    assert statuses(got) == [SKIPPED, OK, SKIPPED] and got[1].total == 0.5
    assert all("returned None" in r.reason for r in got if r.status == SKIPPED)
    assert s.reward_log.counts["examples.rewards.trl_verl:judged_reward/log_metric/judged"] == 1


@pytest.mark.parametrize(
    ("returned", "reason"),
    [
        ([1.0], "returned 1 values for 3 completions"),
        ([1.0, "high", 0.0], "returned str 'high' for completion 1, not a finite number"),
        ([1.0, float("nan"), 0.0], "for completion 1, not a finite number"),
        (0.5, "returned float 0.5, not a list of 3 floats"),
        (RuntimeError("judge down"), "raised RuntimeError: judge down"),
    ],
)
def test_a_bad_list_or_a_raise_marks_every_item_of_the_call_error(returned, reason):
    from rewards import register_reward, unregister_reward

    def bad(completions, **kwargs):
        if isinstance(returned, Exception):
            raise returned
        return returned

    register_reward("bad", bad, replace=True)
    try:
        got = scorer("bad").score_batch(["a", "b", "c"], [None] * 3, [{"prompt": "p"}] * 3)
    finally:
        unregister_reward("bad")
    assert statuses(got) == [ERROR] * 3 and all(reason in r.reason and "\n" not in r.reason for r in got)


def test_items_the_rewards_never_see_stay_out_of_the_call():
    s = UserRewardScorer(RewardConfig(max_chars=5, user=[{"fn": f"{EX}:reverse_reward"}]))
    got = s.score_batch(["cba", "far too long", 7], [None] * 3, [{"prompt": "abc"}] * 3)
    assert statuses(got) == [OK, "too_long", "bad_input"] and got[0].total == 1.0


def test_async_trl_rewards_are_awaited_in_both_paths():
    s = scorer(f"{EX}:async_reverse_reward")
    rows = [{"prompt": "ab"}] * 2
    assert [r.total for r in s.score_batch(["ba", "bb"], [None] * 2, rows)] == [1.0, 0.5]
    got = asyncio.run(
        score_batch_concurrent(s, ["ba", "bb"], [None] * 2, rows, concurrency=4, item_timeout_s=5.0)
    )
    assert [r.total for r in got] == [1.0, 0.5]


def test_a_trl_call_past_the_item_deadline_times_out_its_items():
    from rewards import register_reward, unregister_reward

    async def stuck(completions, **kwargs):
        await asyncio.sleep(5)
        return [1.0] * len(completions)

    register_reward("stuck", stuck, replace=True)
    try:
        got = asyncio.run(
            score_batch_concurrent(
                scorer("stuck"), ["a", "b"], [None] * 2, None, concurrency=2, item_timeout_s=0.1
            )
        )
    finally:
        unregister_reward("stuck")
    assert statuses(got) == [TIMEOUT, TIMEOUT]


@pytest.mark.parametrize("fn", ["compute_score", "compute_score_dict", "async_compute_score"])
def test_verl_compute_score_sync_async_float_and_dict(fn):
    s = scorer(f"{EX}:{fn}")
    got = s.score_batch(["42", "41"], ["42", "42"], [{"data_source": "gsm8k"}] * 2)
    assert [r.total for r in got] == [1.0, 0.0] and statuses(got) == [OK, OK]
    if fn == "compute_score_dict":
        assert s.reward_log.counts == {f"{EX}:compute_score_dict/acc": 2}
        name = f"{EX}:compute_score_dict"  # its other numbers are parts of the result, by name
        assert [r.components for r in got] == [
            {name: 1.0, f"{name}/acc": 1.0},
            {name: 0.0, f"{name}/acc": 0.0},
        ]


def test_a_verl_dicts_finite_numbers_become_components_and_the_rest_stays_out():
    from rewards import register_reward, unregister_reward

    def judged(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": 0.5, "acc": 1, "pred": "42", "ratio": float("nan"), "exact": True}

    register_reward("judged", judged)
    try:
        s = scorer("judged")
        got = s.score_batch(["42"], ["42"], [{"data_source": "x"}])[0]
        alone = scorer("judged").score("42", "42", {"data_source": "x"})  # one item, not a batch
    finally:
        unregister_reward("judged")
    assert got.total == 0.5 and got.components == {"judged": 0.5, "judged/acc": 1.0}
    assert alone.components == got.components
    assert all(type(v) is float for v in got.components.values())  # plain numbers in the results


def test_verl_arguments_data_source_and_extra_info():
    from rewards import register_reward, unregister_reward

    seen = []

    def spy(data_source, solution_str, ground_truth, extra_info=None):
        seen.append((data_source, solution_str, ground_truth, extra_info))
        return {"score": 1}

    register_reward("vspy", spy, replace=True)
    try:
        s = scorer("vspy")
        s.score("x ", "t", {"data_source": "gsm8k", "extra_info": {"index": 3}})
        s.score("y", "t", {"prompt": "p", "level": 2})
    finally:
        unregister_reward("vspy")
    assert seen == [("gsm8k", "x", "t", {"index": 3}), ("text", "y", "t", {"prompt": "p", "level": 2})]


def test_a_verl_dict_without_score_is_an_error():
    from rewards import register_reward, unregister_reward

    register_reward("noscore", lambda data_source, solution_str, ground_truth: {"acc": 1.0}, replace=True)
    try:
        got = scorer("noscore").score("x", "t")
    finally:
        unregister_reward("noscore")
    assert got.status == ERROR and "returned a dict without 'score' (keys: acc)" in got.reason


@pytest.mark.parametrize(
    ("fn", "style", "message"),
    [
        (f"{EX}:reverse_reward", "item", "style: item calls fn(completion, target) once per item"),
        (f"{EX}:compute_score", "trl", "takes no 'completions' (nor **kwargs)"),
        ("examples.addition.reward:addition_reward", "verl", "style: verl calls compute_score("),
        (
            f"{EX}:reverse_reward",
            "verl",
            "fn(completions, **kwargs) needs 'completions', which verl does not",
        ),
        ("Levenshtein:ratio", "trl", "fn(s1, s2, processor, score_cutoff) takes no 'completions'"),
    ],
)
def test_a_declared_style_that_does_not_fit_is_refused_in_one_line(fn, style, message):
    with pytest.raises(RewardSpecError, match=r"^user reward .*") as info:
        scorer(fn, style=style)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_trls_token_id_rewards_get_each_items_completion_ids_from_its_row():
    from rewards import register_reward, unregister_reward

    register_reward("overlong", trl_rewards.get_soft_overlong_punishment(20, 5), replace=True)
    try:
        s = scorer("overlong")
        assert (
            s.takes_token_ids and TOKEN_IDS == TOKEN_IDS_FIELD
        )  # the trainer sends the field the rewards read
        rows = [{TOKEN_IDS: [7] * n} for n in (10, 18, 30)]  # short, in the soft zone, past the cap
        got = s.score_batch(["a", "b", "c"], [None] * 3, rows)
        assert statuses(got) == [OK, OK, OK] and [r.total for r in got] == [0.0, -0.6, -1.0]
        missing = s.score_batch(["a"], [None], [{}])  # scored where no ids were sent: said, not a zero
        assert statuses(missing) == [ERROR] and "needs 'completion_ids'" in missing[0].reason
    finally:
        unregister_reward("overlong")


def test_trl_rewards_with_kwargs_get_token_ids_as_in_trl_and_other_styles_never_see_them():
    assert scorer(
        "trl.rewards:think_format_reward"
    ).takes_token_ids  # fn(completions, **kwargs): TRL gives them
    assert not scorer(f"{EX}:compute_score").takes_token_ids
    seen = []

    def any_kwargs(completion, target, **fields):
        seen.append(sorted(fields))
        return 1.0

    def lists_only(completions, prompts=None):
        return [1.0] * len(completions)

    from rewards import register_reward, unregister_reward

    register_reward("any_kwargs", any_kwargs, replace=True)
    register_reward("lists_only", lists_only, replace=True)
    try:
        assert not scorer("lists_only").takes_token_ids
        s = scorer("any_kwargs")
        assert not s.takes_token_ids
        assert statuses(s.score_batch(["a"], ["t"], [{"x": 1, TOKEN_IDS: [1, 2]}])) == [OK]
        assert seen == [["x"]]
    finally:
        unregister_reward("any_kwargs")
        unregister_reward("lists_only")


def test_a_reward_taking_one_argument_is_refused_naming_the_styles():
    from rewards import register_reward, unregister_reward

    register_reward("one", lambda text: 1.0, replace=True)
    try:
        with pytest.raises(RewardSpecError, match=r"cannot be called as fn\(completion, target\).*TRL's"):
            scorer("one")
    finally:
        unregister_reward("one")
