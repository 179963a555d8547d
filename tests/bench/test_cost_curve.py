"""The cost-curve section: its points, the fitted exponent, and the figure beside bench.md."""

from __future__ import annotations

import pytest

from bench.cost_curve import FIGURE, PROMPT_ROOM, CostCurvePlan, _points, exponent
from bench.plots import write_figures
from trainer.model_config import MODEL_SIZES


def test_exponent_is_the_slope_in_log_log():
    xs = [100.0, 200.0, 400.0, 800.0]
    assert exponent(xs, [3 * x**1.5 for x in xs]) == pytest.approx(1.5)
    assert exponent(xs, [7.0] * 4) == pytest.approx(0.0)
    assert exponent([5.0, 5.0], [1.0, 2.0]) is None  # no growth in the work: no exponent


def test_every_factor_grows_alone_from_the_base():
    plan = CostCurvePlan()
    points = _points(plan)
    by_factor: dict[str, list] = {}
    for factor, value, updates, options in points:
        by_factor.setdefault(factor, []).append((value, updates, options))
    assert [v for v, _, _ in by_factor["K (completions per prompt)"]] == list(plan.group_sizes)
    assert [v for v, _, _ in by_factor["prompts per step"]] == list(plan.prompts)
    for value, updates, _ in by_factor["max new tokens"]:
        assert updates == {"sampling.max_new_tokens": value, "model.block_size": value + PROMPT_ROOM}
    for size, updates, _ in by_factor["model"]:
        assert updates["model.size"] == size and updates["model.n_embd"] == MODEL_SIZES[size]["n_embd"]
    for cost in plan.worker_rewards:
        series = by_factor[f"reward workers ({cost})"]
        assert [o["pool_cfg"]["num_workers"] for _, _, o in series] == list(plan.workers)
        assert all(u == {} and o["rewards"] == "pool" and o["reward"]["user"] for _, u, o in series)


def test_the_figure_is_written_beside_bench_md(tmp_path):
    series = [{"value": v, "step_s": 0.1 * v, "tokens_per_s": 1000.0 * v} for v in (4, 8, 16)]
    section = {
        "status": "ok",
        "data": {"points": {"K": series, "model": [{"value": "tiny", "step_s": 0.2, "tokens_per_s": 9.0}]}},
        "figures": [{"file": FIGURE, "title": "t", "kind": "cost_curve"}],
    }
    written = write_figures({"sections": [section, {"status": "ok"}]}, tmp_path)
    assert written == [tmp_path / FIGURE]
    assert written[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and written[0].stat().st_size > 5000
