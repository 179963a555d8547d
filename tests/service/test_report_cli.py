"""`python -m service.report`: usage and exit 2 for --help mistakes and a directory without records;
report.png's axes: whole-number steps, a linear loss axis with plain labels, exact match drawn apart."""

from __future__ import annotations

import json

import pytest

from service.report import write_report
from service.report.__main__ import main


def test_missing_directory_is_usage_and_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m service.report") and "holds no metrics.jsonl" in err
    assert "Traceback" not in err


def test_help_is_usage(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0 and "usage: python -m service.report" in capsys.readouterr().out


def test_report_axes(tmp_path, monkeypatch):
    rows = [{"step": s, "phase": "sft", "loss": 2.0 / s, "step_time_s": 0.1} for s in range(1, 4)]
    rows += [
        {"step": s, "phase": "grpo", "loss": 0.01, "kl": 0.001, "reward_mean": 0.5, "step_time_s": 0.2}
        for s in (4, 5)
    ]
    evals = [
        {"step": s, "phase": "grpo", "exact_match": 0.5, "valid_rate": 0.5, "reward_mean": 0.6}
        for s in (3, 5)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to look at it
    write_report(tmp_path, title="run-42")
    fig = figures[0]
    assert fig._suptitle.get_text() == "run-42"
    loss_ax, eval_ax = fig.axes[1], fig.axes[3]
    assert loss_ax.get_yscale() == "linear"
    ticks = [t for ax in fig.axes for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
    lines = {line.get_label(): line for line in eval_ax.get_lines()}
    exact, valid = lines["exact_match"], lines["valid_rate"]
    assert exact.get_linestyle() != valid.get_linestyle() and exact.get_marker() != valid.get_marker()
    assert eval_ax.get_lines().index(exact) > eval_ax.get_lines().index(valid)  # drawn on top
    monkeypatch.undo()
    plt.close(fig)
