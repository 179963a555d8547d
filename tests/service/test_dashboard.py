"""The Grafana dashboard: generated from the metric catalogue, and every series it queries is one a
live Ray node really exports when the run's exporters and a faulty reward pool run on it."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from dashboard_series import dashboard_series

from service.dashboard import (
    DASHBOARD_FILE,
    dashboard_text,
    install,
    ray_dashboards_dir,
)

REPO = Path(__file__).resolve().parents[2]
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")
FEN = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"


def test_the_committed_dashboard_is_the_generated_one():
    assert DASHBOARD_FILE.read_text() == dashboard_text(), "run: python -m service.dashboard write"


def test_every_panel_has_queries_and_a_unique_id():
    dashboard = json.loads(DASHBOARD_FILE.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 14 and all(p["targets"] for p in panels)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all('run_id=~"$run_id"' in t["expr"] for p in panels for t in p["targets"])


def test_install_writes_beside_rays_own_dashboards(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR", raising=False)
    with pytest.raises(ValueError, match="start the Ray head"):
        install(tmp_path)
    ray_dashboards_dir(tmp_path).mkdir(parents=True)
    path = install(tmp_path)
    assert path.parent == tmp_path / "session_latest/metrics/grafana/dashboards"
    assert json.loads(path.read_text())["uid"] == "grpo-run"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _exported(metrics_url: str, run_id: str) -> set[str]:
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    names = set()
    for line in text.splitlines():
        if not line.startswith("#") and f'run_id="{run_id}"' in line:
            name = line.split("{", 1)[0]
            names.add(name)
            if 'component="' in line:  # a {name: number} figure: the series and its tag value
                tag = line.split('component="', 1)[1].split('"', 1)[0]
                names.add(f"{name}/{tag}")
            names.update(name.removesuffix(part) for part in HISTOGRAM_PARTS if name.endswith(part))
    return names


@pytest.fixture
def metrics_cluster(monkeypatch):
    """An embedded Ray whose node exports Prometheus text on a known port; test rewards importable."""
    import ray

    monkeypatch.syspath_prepend(str(REPO / "tests" / "actors"))  # the scorer is built here first

    if ray.is_initialized():
        pytest.skip("another Ray session is already running in this process")
    port = _free_port()
    path = os.pathsep.join([str(REPO / "tests" / "actors"), str(REPO), os.environ.get("PYTHONPATH", "")])
    ray.init(
        address="local", num_cpus=4, include_dashboard=False, logging_level="ERROR",
        runtime_env={"env_vars": {"PYTHONPATH": path}}, _metrics_export_port=port,
        _system_config={"metrics_report_interval_ms": 500},
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        ray.shutdown()


def _publish_run_records(run_id: str):
    """The run's exporter (its control actor), fed an SFT step, GRPO steps (one skipped) and an eval,
    with the episode figures an environment task's records carry."""
    import ray

    from actors.run.control import EVAL, STEP, start_run_control

    control = start_run_control(run_id)
    grpo = {"loss": -0.1, "reward_mean": 0.4, "kl": 0.01, "entropy": 1.2, "step_time_s": 1.0,
            "completions_per_s": 64.0, "sample_s": 0.4, "reward_wait_s": 0.01, "ref_s": 0.2, "update_s": 0.3,
            "turns_mean": 3.5, "env_errors": 0.0, "env_step_s": 0.001,
            "reward_components": {"validity": 0.9, "user_rewards:format": 0.5}}  # fmt: skip
    control.publish.remote(STEP, {"step": 1, "phase": "sft", "loss": 2.0, "step_time_s": 0.3, "skipped": 0.0})
    control.publish.remote(STEP, {"step": 2, "phase": "grpo", "skipped": 0.0, **grpo})
    control.publish.remote(STEP, {"step": 3, "phase": "grpo", "skipped": 1.0, **grpo})
    control.publish.remote(
        EVAL,
        {
            "step": 3,
            "phase": "grpo",
            "exact_match": 0.2,
            "valid_rate": 0.6,
            "reward_mean": 0.5,
            "success_rate": 0.8,
            "turns_mean": 3.4,
        },  # fmt: skip
    )
    ray.get(control.unwritten.remote())
    return control


def _faulty_pool(run_id: str):
    """A real pool whose user rewards raise on RAISE and spin on HANG (a timeout: killed, restarted)."""
    from actors.pool.config import PoolConfig
    from actors.pool.reward_pool import RewardPool
    from rewards import RewardConfig
    from rewards.config import UserRewardSpec

    reward = RewardConfig(
        user=[UserRewardSpec(fn=f"user_rewards:{fn}") for fn in ("raises_on_marker", "spins_on_marker")]
    )
    cfg = PoolConfig(
        name_prefix=f"dash-{uuid.uuid4().hex[:6]}", num_workers=2, chunk_size=8, min_chunk_size=2,
        split_parts=4, chunk_timeout_s=1.0, max_retries=1, error_rate_threshold=1.0,
    )  # fmt: skip
    return RewardPool.create(reward, cfg, run_id=run_id)


@pytest.mark.slow
def test_every_dashboard_series_is_exported_by_a_live_node(metrics_cluster):
    """Counters stay; Ray exports a gauge only for a while after it is set, so the series are
    gathered over several scrapes while the pool works and right after the run's records."""
    run_id = f"dash-{uuid.uuid4().hex[:6]}"
    wanted, exported = dashboard_series(), set()
    completions = [FEN] * 12 + ["RAISE"] + [FEN] * 6 + ["HANG " + FEN] + [FEN] * 12
    with _faulty_pool(run_id) as pool:
        pool.collect([pool.submit(completions, [FEN] * len(completions))], timeout_s=120)
        control = _publish_run_records(run_id)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not wanted <= exported:
            pool.score([FEN] * 16, [FEN] * 16)  # keeps the pool's gauges fresh; the killed worker answers
            exported |= _exported(metrics_cluster, run_id)
            time.sleep(0.5)
    missing = sorted(wanted - exported)
    assert missing == [], f"the dashboard queries series this node does not export: {missing}"
    components = {name for name in exported if name.startswith("ray_grpo_reward_components/")}
    assert components == {
        "ray_grpo_reward_components/validity",
        "ray_grpo_reward_components/user_rewards:format",
    }
    del control
