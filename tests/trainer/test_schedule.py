"""The run's schedule: which pairs a step uses, when evaluations and checkpoints are due."""

from __future__ import annotations

import pytest

from trainer.config import TrainerConfig
from trainer.schedule import Schedule


def _schedule(sft=3, grpo=5, batch=4, prompts=2, eval_every=2, every=50) -> Schedule:
    return Schedule.of(
        TrainerConfig.model_validate(
            {
                "sft": {"steps": sft, "batch_size": batch},
                "grpo": {"steps": grpo, "prompts_per_step": prompts, "eval_every": eval_every},
                "checkpoint": {"every_steps": every},
            }
        )
    )


def test_step_windows_tile_one_stream_across_both_phases():
    schedule = _schedule()
    windows = [schedule.step_window(s) for s in range(1, 9)]
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
            schedule.step_window(bad)


def test_evaluations_are_due_at_grpo_start_every_eval_every_and_at_the_end():
    schedule = _schedule(sft=3, grpo=5, eval_every=2)
    due = {s: schedule.eval_due(s) for s in range(0, 9)}
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
    assert [schedule.phase_of(s) for s in (3, 4)] == ["sft", "grpo"]
    scratch = _schedule(sft=0, grpo=2, eval_every=5)
    assert [scratch.eval_due(s) for s in (0, 1, 2)] == ["start", None, "final"]
    sft_only = _schedule(sft=2, grpo=0)
    assert [sft_only.eval_due(s) for s in (1, 2)] == [None, "final"]


def test_checkpoints_are_due_every_n_steps_at_the_end_and_when_stopping():
    schedule = _schedule(sft=3, grpo=5, every=3)
    assert [s for s in range(1, 9) if schedule.checkpoint_due(s)] == [3, 6, 8]
    assert schedule.checkpoint_due(4, stopping=True)
    assert schedule.total == 8 and schedule.remaining(2) == {"sft": 1, "grpo": 5}
