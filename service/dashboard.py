"""The Grafana dashboard of a run and its reward pool, generated from the one metric catalogue.

    python -m service.dashboard write [--out deploy/grafana/grpo_dashboard.json]
    python -m service.dashboard install [--ray-temp-dir /tmp/ray]

`write` regenerates the committed JSON (a test checks that it is current). `install` writes it
next to Ray's own dashboards: Ray writes them at head start into
`<temp dir>/session_latest/metrics/grafana/dashboards/` (or `$RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR`)
and provisions that folder to Grafana through `.../grafana/provisioning/dashboards/default.yml`,
so a Grafana started with Ray's `grafana.ini` shows this dashboard in its "Ray" folder, and the
Ray dashboard's Metrics view links to it. Every query names `ray_` series from
`actors.metric_names`; panels are filtered by the `run_id` variable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.metric_names import (
    EVAL_METRICS,
    POOL_SERIES,
    SKIPPED_COUNTER,
    STEP_METRICS,
    STEPS_COUNTER,
    prometheus_name,
)

REPO = Path(__file__).resolve().parents[1]
DASHBOARD_FILE = REPO / "deploy" / "grafana" / "grpo_dashboard.json"
DASHBOARD_UID = "grpo-run"
RUN = '{run_id=~"$run_id"}'
OUTPUT_DIR_ENV = (
    "RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR"  # where Ray writes (and provisions) its dashboards
)


@dataclass(frozen=True)
class PanelSpec:
    title: str
    targets: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"
    stack: bool = False
    description: str = ""


def _step(key: str) -> str:
    series = next(m.series for m in STEP_METRICS if m.key == key)
    return prometheus_name(series)


def _eval(key: str) -> str:
    series = next(m.series for m in EVAL_METRICS if m.key == key)
    return prometheus_name(series)


def _pool(series: str, suffix: str = "") -> str:
    return prometheus_name(series, POOL_SERIES[series].kind) + suffix


def _by_phase(key: str) -> tuple[str, str]:
    return (f"{_step(key)}{RUN}", "{{run_id}} {{phase}}")


RUN_PANELS: tuple[PanelSpec, ...] = (
    PanelSpec("Reward (train and held-out)", (
        (f'{_step("reward_mean")}{{run_id=~"$run_id", phase="grpo"}}', "train {{run_id}}"),
        (f"{_eval('reward_mean')}{RUN}", "held-out {{run_id}} ({{phase}} policy)"),
    )),
    PanelSpec("Reward components (train)", (
        (f'{_step("reward_components")}{{run_id=~"$run_id", phase="grpo"}}', "{{component}} {{run_id}}"),
    ), description="mean of each named component of the reward: each user reward, a task's own parts"),
    PanelSpec("Loss", (_by_phase("loss"),)),
    PanelSpec("KL to the reference", (_by_phase("kl"),)),
    PanelSpec("Entropy of sampled tokens", (_by_phase("entropy"),)),
    PanelSpec("GRPO step time split", tuple(
        (f'{_step(key)}{{run_id=~"$run_id", phase="grpo"}}', f"{label} {{{{run_id}}}}")
        for key, label in (("sample_s", "sampling"), ("reward_wait_s", "reward wait"),
                           ("ref_s", "reference"), ("update_s", "update"))
    ), unit="s", stack=True, description="seconds per GRPO step, stacked"),
    PanelSpec("Step time", (_by_phase("step_time_s"),), unit="s"),
    PanelSpec("Completions per second (per rank)", (
        (f'{_step("completions_per_s")}{{run_id=~"$run_id", phase="grpo"}}', "{{run_id}}"),
    )),
    PanelSpec("Held-out exact match and valid rate", (
        (f"{_eval('exact_match')}{RUN}", "exact match {{run_id}}"),
        (f"{_eval('valid_rate')}{RUN}", "valid {{run_id}}"),
    ), unit="percentunit"),
    PanelSpec("Episodes (environment tasks): turns, success, errors", (
        (f'{_step("turns_mean")}{{run_id=~"$run_id", phase="grpo"}}', "turns {{run_id}}"),
        (f"{_eval('turns_mean')}{RUN}", "held-out turns {{run_id}}"),
        (f"{_eval('success_rate')}{RUN}", "held-out success {{run_id}}"),
        (f'{_step("env_errors")}{{run_id=~"$run_id", phase="grpo"}}', "env errors {{run_id}}"),
    ), description="turns per episode, held-out share won, episodes ended by env_error or timeout"),
    PanelSpec("Environment seconds per reset or step", (
        (f'{_step("env_step_s")}{{run_id=~"$run_id", phase="grpo"}}', "{{run_id}}"),
    ), unit="s"),
    PanelSpec("Progress: global step, steps per minute, skipped updates", (
        (f"{_step('step')}{RUN}", "step {{run_id}} ({{phase}})"),
        (f"sum by (run_id) (rate({prometheus_name(STEPS_COUNTER[0], 'counter')}{RUN}[1m])) * 60", "steps/min {{run_id}}"),
        (f"sum by (run_id) ({prometheus_name(SKIPPED_COUNTER[0], 'counter')}{RUN})", "skipped {{run_id}}"),
    )),
)  # fmt: skip

POOL_PANELS: tuple[PanelSpec, ...] = (
    PanelSpec("Reward pool throughput", (
        (f"sum by (run_id) (rate({_pool('reward_pool_items')}{RUN}[1m]))", "scored/s {{run_id}}"),
        (f"{_pool('reward_pool_items_per_s')}{RUN}", "last 10 s {{run_id}}"),
    ), unit="ops"),
    PanelSpec("Reward pool queue depth", ((f"{_pool('reward_pool_queue_depth')}{RUN}", "{{run_id}}"),)),
    PanelSpec("Reward pool timeouts, errors, retries", (
        (f"sum by (run_id) ({_pool('reward_pool_timeouts')}{RUN})", "timeouts {{run_id}}"),
        (f"sum by (run_id) ({_pool('reward_pool_errors')}{RUN})", "errors {{run_id}}"),
        (f"sum by (run_id) ({_pool('reward_pool_retries')}{RUN})", "retried chunks {{run_id}}"),
    )),
    PanelSpec("Reward worker restarts", (
        (f"sum by (run_id, worker) ({_pool('reward_pool_worker_restarts')}{RUN})", "{{worker}}"),
    )),
    PanelSpec("Reward worker memory (RSS after its last call)", (
        (f"max by (run_id, worker) ({_pool('reward_pool_worker_rss_mb')}{RUN})", "{{worker}}"),
    ), unit="mbytes", description="a line that only climbs is a reward leaking memory (pool.max_worker_rss_mb)"),
    PanelSpec("Time blocked waiting for rewards (p50, p95)", tuple(
        (f"histogram_quantile({q}, sum by (le, run_id) (rate({_pool('reward_pool_wait_s', '_bucket')}{RUN}[5m])))",
         f"p{int(q * 100)} {{{{run_id}}}}")
        for q in (0.5, 0.95)
    ), unit="s"),
)  # fmt: skip


def _panel(spec: PanelSpec, panel_id: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": spec.title,
        "description": spec.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {
            "defaults": {
                "unit": spec.unit,
                "custom": {
                    "stacking": {"mode": "normal" if spec.stack else "none"},
                    "fillOpacity": 60 if spec.stack else 0,
                },
            },
            "overrides": [],
        },  # fmt: skip
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(spec.targets)
        ],
    }


def _row(title: str, panel_id: int, y: int) -> dict[str, Any]:
    return {"id": panel_id, "type": "row", "title": title, "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []}  # fmt: skip


def _variables() -> list[dict[str, Any]]:
    step = _step("step")
    return [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
        {"name": "run_id", "type": "query", "label": "run", "multi": True, "includeAll": True,
         "datasource": {"type": "prometheus", "uid": "${datasource}"}, "refresh": 2,
         "query": {"query": f"label_values({step}, run_id)", "refId": "run_id"},
         "definition": f"label_values({step}, run_id)", "current": {"text": "All", "value": "$__all"}},
    ]  # fmt: skip


def build_dashboard() -> dict[str, Any]:
    """The dashboard JSON: a row of run panels, a row of reward-pool panels."""
    panels, panel_id, y = [], 1, 0
    for title, specs in (("Training run", RUN_PANELS), ("Reward pool", POOL_PANELS)):
        panels.append(_row(title, panel_id, y))
        panel_id, y = panel_id + 1, y + 1
        for i, spec in enumerate(specs):
            panels.append(_panel(spec, panel_id, 12 * (i % 2), y + 8 * (i // 2)))
            panel_id += 1
        y += 8 * ((len(specs) + 1) // 2)
    return {
        "uid": DASHBOARD_UID,
        "title": "GRPO training run",
        "tags": ["grpo", "ray"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": _variables()},
        "panels": panels,
    }


def dashboard_text() -> str:
    return json.dumps(build_dashboard(), indent=2) + "\n"


def queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard (panel targets and variable queries)."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return exprs


def ray_dashboards_dir(ray_temp_dir: str | Path = "/tmp/ray") -> Path:
    """The folder Ray provisions its own Grafana dashboards from on this head node."""
    configured = os.environ.get(OUTPUT_DIR_ENV)
    if configured:
        return Path(configured)
    return Path(ray_temp_dir) / "session_latest" / "metrics" / "grafana" / "dashboards"


def install(ray_temp_dir: str | Path = "/tmp/ray") -> Path:
    """Copy the dashboard beside Ray's own; returns where it went (ValueError if Ray wrote none)."""
    target = ray_dashboards_dir(ray_temp_dir)
    if not target.is_dir():
        raise ValueError(
            f"{target} does not exist: start the Ray head (with its dashboard) on this machine first"
        )
    path = target / DASHBOARD_FILE.name
    path.write_text(dashboard_text(), encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.dashboard", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    write = commands.add_parser("write", help="regenerate the dashboard JSON")
    write.add_argument("--out", default=str(DASHBOARD_FILE))
    put = commands.add_parser("install", help="copy it beside Ray's own Grafana dashboards")
    put.add_argument("--ray-temp-dir", default="/tmp/ray", help="the head's --temp-dir (default /tmp/ray)")
    args = parser.parse_args(argv)
    try:
        if args.command == "write":
            Path(args.out).write_text(dashboard_text(), encoding="utf-8")
            print(args.out)
        else:
            print(install(args.ray_temp_dir))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
