"""report.png: reward, loss, KL, held-out evaluation and the GRPO step-time split over the global steps.

Drawn with matplotlib's Agg backend (no display needed) from metrics.jsonl and eval.jsonl only,
so it can be redrawn for any run directory, finished or not.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from service.report.timing import draw_pool_size, draw_step_share, draw_step_time
from service.run_files import EVAL_FILE, METRICS_FILE, REPORT_FILE, read_jsonl


def _series(
    rows: Sequence[dict[str, Any]], key: str, phase: str | None = None
) -> tuple[list[int], list[float]]:
    steps, values = [], []
    for row in rows:
        value = row.get(key)
        if (
            (phase is None or row.get("phase") == phase)
            and isinstance(value, int | float)
            and value is not None
        ):
            steps.append(int(row["step"]))
            values.append(float(value))
    return steps, values


def _moving_average(values: Sequence[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _legend(ax, **kwargs) -> None:
    if ax.get_legend_handles_labels()[0]:  # an empty panel gets no (warning-raising) legend
        ax.legend(**kwargs)


def _draw_reward(ax, metrics, evals) -> None:
    steps, reward = _series(metrics, "reward_mean", "grpo")
    if steps:
        ax.plot(steps, reward, color="tab:blue", alpha=0.3, lw=1, label="train (per step)")
        ax.plot(steps, _moving_average(reward, 10), color="tab:blue", lw=2, label="train (10-step mean)")
    e_steps, e_reward = _series(evals, "reward_mean")
    if e_steps:
        ax.plot(e_steps, e_reward, "o-", color="tab:red", label="held-out (greedy)")
    ax.set_title("mean reward")
    _legend(ax, fontsize=7)


def _draw_loss(ax, metrics) -> None:
    steps, loss = _series(metrics, "loss", "sft")
    if steps:
        ax.plot(steps, loss, color="tab:green", lw=1, label="SFT cross-entropy")
    g_steps, g_loss = _series(metrics, "loss", "grpo")
    if g_steps:
        twin = ax.twinx()
        twin.plot(g_steps, g_loss, color="tab:purple", lw=1, label="GRPO loss (right)")
        _legend(twin, fontsize=7, loc="upper right")
    ax.set_title("loss")
    _legend(ax, fontsize=7, loc="upper left")


def _draw_kl(ax, metrics) -> None:
    steps, kl = _series(metrics, "kl", "grpo")
    if steps:
        ax.plot(steps, kl, color="tab:orange", lw=1, label="KL to reference")
    e_steps, entropy = _series(metrics, "entropy", "grpo")
    if e_steps:
        twin = ax.twinx()
        twin.plot(e_steps, entropy, color="tab:gray", lw=1, alpha=0.7, label="entropy (right)")
        _legend(twin, fontsize=7, loc="upper right")
    ax.set_title("KL and entropy (GRPO)")
    _legend(ax, fontsize=7, loc="upper left")


# Held-out figures: exact match is drawn last, dashed, with hollow squares, so it stays visible
# where it equals the valid rate (an exact FEN is a valid one).
_EVAL_STYLES = (
    ("valid_rate", {"color": "tab:green", "marker": "o", "ls": "-"}),
    ("reward_mean", {"color": "tab:blue", "marker": "o", "ls": "-"}),
    ("exact_match", {"color": "tab:red", "marker": "s", "ls": "--", "mfc": "none", "ms": 8, "lw": 1.5}),
)


def _draw_eval(ax, evals) -> None:
    for key, style in _EVAL_STYLES:
        steps, values = _series(evals, key)
        if steps:
            ax.plot(steps, values, label=key, **style)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("held-out evaluation")
    _legend(ax, fontsize=7)


def load_plotting() -> None:
    """Import matplotlib with its file-only backend (about 0.6 s of CPU): a driver calls it in a
    thread while its run trains, so the report at the end does not wait for it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401


def write_report(run_dir: str | Path, title: str | None = None) -> Path:
    """Draw the run's curves into run_dir/report.png; returns its path."""
    load_plotting()
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    run_dir = Path(run_dir)
    metrics, evals = read_jsonl(run_dir / METRICS_FILE), read_jsonl(run_dir / EVAL_FILE)
    fig, axes = plt.subplots(3, 2, figsize=(11, 11))
    _draw_reward(axes[0][0], metrics, evals)
    _draw_loss(axes[0][1], metrics)
    _draw_kl(axes[1][0], metrics)
    _draw_eval(axes[1][1], evals)
    draw_step_time(axes[2][0], metrics)
    draw_step_share(axes[2][1], metrics)
    draw_pool_size(axes[2][1], metrics)
    for ax in fig.axes:  # twins included: steps are whole numbers, values plain (no offset or 1e-x)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_formatter(ScalarFormatter(useOffset=False))
    for ax in axes.flat:
        ax.set_xlabel("global step (SFT, then GRPO)")
        ax.grid(alpha=0.3)
    fig.suptitle(title or run_dir.name)
    fig.tight_layout()
    path = run_dir / REPORT_FILE
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
