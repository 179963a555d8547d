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


KINDS = {"cost_curve": _cost_curve}


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
