"""The train loop's pure parts: which pairs a step uses, when evaluations are due, metric names."""

from __future__ import annotations

import pytest

from actors.run_control import RunControl
from actors.run_metrics import EVAL_GAUGES, METRIC_NAMES, STEP_GAUGES
from actors.train_data import StepData, StepPairs, file_source, generated_source, step_window
from actors.train_loop import eval_due, eval_phase
from trainer.chess_data import Pair, pair_at
from trainer.config import TrainerConfig


def _cfg(sft=3, grpo=5, batch=4, prompts=2, eval_every=2) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "sft": {"steps": sft, "batch_size": batch},
            "grpo": {"steps": grpo, "prompts_per_step": prompts, "eval_every": eval_every},
            "data": {"min_plies": 1, "max_plies": 3},
        }
    )


def test_step_windows_tile_one_stream_across_both_phases():
    cfg = _cfg()
    windows = [step_window(s, cfg) for s in range(1, 9)]
    assert windows[:3] == [("sft", 0, 4), ("sft", 4, 4), ("sft", 8, 4)]
    assert windows[3:] == [
        ("grpo", 12, 2),
        ("grpo", 14, 2),
        ("grpo", 16, 2),
        ("grpo", 18, 2),
        ("grpo", 20, 2),
    ]
    for bad in (0, 9):
        with pytest.raises(ValueError):
            step_window(bad, cfg)


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
    data = StepData(cfg, generated_source(cfg), rank=0, world=1)
    try:
        for step in (1, 2, 4, 5, 8):  # in order and with jumps (a resume)
            _, first, count = step_window(step, cfg)
            expected = [pair_at(cfg.data.seed, first + i, 1, 3) for i in range(count)]
            assert list(data.pairs(step)) == expected
    finally:
        data.close()


def test_file_source_shuffles_each_epoch_and_covers_every_pair():
    pairs = [Pair(str(i), "t") for i in range(5)]
    at = file_source(pairs, seed=3)
    first, second = [at(i).prompt for i in range(5)], [at(i).prompt for i in range(5, 10)]
    assert sorted(first) == sorted(second) == ["0", "1", "2", "3", "4"]
    assert first != second or first != ["0", "1", "2", "3", "4"]
    assert [at(i).prompt for i in range(5)] == first  # a pure function of the index
    with pytest.raises(ValueError, match="no usable pairs"):
        file_source([], seed=0)


def test_evaluations_are_due_at_grpo_start_every_eval_every_and_at_the_end():
    cfg = _cfg(sft=3, grpo=5, eval_every=2)
    due = {s: eval_due(s, cfg) for s in range(0, 9)}
    assert due == {
        0: None,
        1: None,
        2: None,
        3: "start",
        4: None,
        5: "periodic",
        6: None,
        7: "periodic",
        8: "final",
    }
    assert [eval_phase(s, cfg) for s in (3, 4)] == ["sft", "grpo"]
    scratch = _cfg(sft=0, grpo=2, eval_every=5)
    assert [eval_due(s, scratch) for s in (0, 1, 2)] == ["start", None, "final"]
    sft_only = _cfg(sft=2, grpo=0)
    assert [eval_due(s, sft_only) for s in (1, 2)] == [None, "final"]


def test_metric_names_are_listed_once_and_prefixed():
    assert len(METRIC_NAMES) == len(set(METRIC_NAMES))
    assert all(name.startswith("grpo_") for name in METRIC_NAMES)
    for key in ("reward_mean", "loss", "kl", "entropy", "step_time_s", "completions_per_s", "reward_wait_s"):
        assert key in STEP_GAUGES
    assert set(EVAL_GAUGES) == {"reward_mean", "exact_match", "valid_rate"}
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
