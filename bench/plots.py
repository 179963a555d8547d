"""The benchmark's figures: PNG files written beside bench.md for the sections that ask for one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen
from matplotlib import ticker  # noqa: E402


def _cost_curve(section: dict[str, Any], path: Path, title: str) -> None:
    """One panel per factor: seconds per step (log scale) against the factor's value."""
    points = section["data"]["points"]
    cols = min(3, len(points))
    rows = -(-len(points) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    for ax in axes.flat[len(points) :]:
        ax.set_visible(False)
    for ax, (factor, series) in zip(axes.flat, points.items(), strict=False):
        labels = [str(p["value"]) for p in series]
        numeric = all(isinstance(p["value"], int | float) for p in series)
        xs = [p["value"] for p in series] if numeric else list(range(len(series)))
        ax.plot(xs, [p["step_s"] for p in series], "o-", label="step s")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%.3g"))
        ax.yaxis.set_minor_formatter(ticker.FormatStrFormatter("%.3g"))
        if numeric:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xs, labels)
        ax.set_title(factor, fontsize=9)
        ax.set_ylabel("seconds per step", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        rate = ax.twinx()
        rate.plot(xs, [p["tokens_per_s"] for p in series], "s--", color="tab:orange", label="tokens/s")
        rate.set_ylabel("completion tokens/s", fontsize=8, color="tab:orange")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _autoscale(section: dict[str, Any], path: Path, title: str) -> None:
    """Two panels over the GRPO steps of each variant's first round: the pool's size, the step time."""
    runs = {name: rounds[0] for name, rounds in section["data"]["steps"].items() if rounds}
    fig, (size, step) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for name, records in runs.items():
        xs = list(range(1, len(records) + 1))
        size.step(xs, [r["pool_workers"] for r in records], where="post", label=name)
        step.plot(xs, [r["step_time_s"] for r in records], label=name)
    size.set_ylabel("reward workers", fontsize=8)
    size.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    step.set_ylabel("seconds per step", fontsize=8)
    step.set_xlabel("GRPO step", fontsize=8)
    for ax in (size, step):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


KINDS = {"cost_curve": _cost_curve, "autoscale": _autoscale}


def write_figures(result: dict[str, Any], out: Path) -> list[Path]:
    """Every figure of every section that has its data; returns the files written."""
    written = []
    for section in result["sections"]:
        for figure in section.get("figures", []):
            if section["status"] == "ok" and figure["kind"] in KINDS:
                path = out / figure["file"]
                KINDS[figure["kind"]](section, path, figure["title"])
                written.append(path)
    return written
