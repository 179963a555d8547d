"""A rank's run, its pure parts: each step's pairs, the control actor's records, the metric names."""

from __future__ import annotations

import pytest

from actors.run.control import RunControl
from actors.run.metrics import EVAL_GAUGES, METRIC_NAMES, STEP_GAUGES
from actors.run.step_data import StepData, StepPairs
from trainer.config import TrainerConfig
from trainer.data.chess_games import GameStream, pair_at
from trainer.data.pairs import Pair
from trainer.schedule import Schedule


def _cfg(sft=3, grpo=5, batch=4, prompts=2, eval_every=2) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "sft": {"steps": sft, "batch_size": batch},
            "grpo": {"steps": grpo, "prompts_per_step": prompts, "eval_every": eval_every},
        }
    )


def test_step_pairs_are_generated_only_when_read():
    reads = []

    def source(i: int) -> Pair:
        reads.append(i)
        return Pair(str(i), "t")

    pairs = StepPairs(10, 6, source)
    assert len(pairs) == 6 and reads == []
    pairs.fill(rank=1, world=2)  # rank 1 of 2 reads items 3..5
    assert sorted(reads) == [13, 14, 15]
    assert [p.prompt for p in pairs[3:]] == ["13", "14", "15"] and len(reads) == 3
    assert pairs[-1].prompt == "15" and pairs[0].prompt == "10"
    with pytest.raises(IndexError):
        pairs[6]


def test_step_data_gives_the_same_pairs_as_pair_at_with_prefetch():
    cfg = _cfg()
    schedule = Schedule.of(cfg)
    data = StepData(schedule, GameStream(cfg.data.seed, 1, 3), rank=0, world=1)
    try:
        for step in (1, 2, 4, 5, 8):  # in order and with jumps (a resume)
            _, first, count = schedule.step_window(step)
            expected = [pair_at(cfg.data.seed, first + i, 1, 3) for i in range(count)]
            assert list(data.pairs(step)) == expected
    finally:
        data.close()


def test_sft_steps_draw_from_the_training_stream_and_grpo_steps_from_the_grpo_stream():
    schedule = Schedule.of(_cfg(sft=2, grpo=3, batch=3, prompts=2))
    data = StepData(
        schedule, lambda i: Pair(str(i), "sft"), rank=0, world=1, grpo_source=lambda i: Pair(str(i), None)
    )
    try:
        assert [p.target for p in data.pairs(2)] == ["sft"] * 3
        grpo = data.pairs(3)  # prepared in the background while step 2 trained
        assert [p.prompt for p in grpo] == ["6", "7"] and {p.target for p in grpo} == {None}
        assert {p.target for p in data.refill(4, 0)} == {None}
    finally:
        data.close()


def test_metric_names_are_listed_once_and_prefixed():
    assert len(METRIC_NAMES) == len(set(METRIC_NAMES))
    assert all(name.startswith("grpo_") for name in METRIC_NAMES)
    for key in ("reward_mean", "loss", "kl", "entropy", "step_time_s", "completions_per_s", "reward_wait_s"):
        assert key in STEP_GAUGES
    assert set(EVAL_GAUGES) == {"reward_mean", "exact_match", "valid_rate", "success_rate", "turns_mean"}
    assert "grpo_skipped_steps" in METRIC_NAMES


def test_run_control_keeps_the_first_stop_reason_and_drains_in_order():
    control = RunControl("r", export_metrics=False)
    assert control.stop_reason() is None
    control.request_stop("received SIGTERM")
    control.request_stop("later")
    assert control.stop_reason() == "received SIGTERM"
    control.publish("step", {"step": 1})
    control.publish("eval", {"step": 1})
    assert control.drain() == [("step", {"step": 1}), ("eval", {"step": 1})] and control.drain() == []
    with pytest.raises(ValueError, match="event kind"):
        control.publish("nonsense", {})


def test_dynamic_sampling_refills_come_from_their_own_region_of_the_stream():
    from actors.run.step_data import MAX_REFILL_ROUNDS, REFILL_BASE

    cfg = TrainerConfig.model_validate(
        {"sft": {"steps": 2, "batch_size": 3}, "grpo": {"steps": 3, "prompts_per_step": 4}}
    )
    schedule = Schedule.of(cfg)
    stream = GameStream(cfg.data.seed, 1, 3)
    data = StepData(schedule, stream, rank=1, world=2)
    try:
        extra = data.refill(4, 1)
        assert list(extra) == [
            pair_at(cfg.data.seed, REFILL_BASE + (4 * MAX_REFILL_ROUNDS + 1) * 4 + i, 1, 3) for i in range(4)
        ]
        assert list(data.refill(4, 1)) == list(extra)  # a resumed run draws the same ones
        assert set(extra).isdisjoint(data.refill(4, 0)) and set(extra).isdisjoint(data.pairs(4))
    finally:
        data.close()
    assert type(cfg.grpo).model_fields["dynamic_sampling_tries"].metadata[-1].le == MAX_REFILL_ROUNDS
