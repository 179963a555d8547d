"""The client, `ray job submit` and the CLI against a real token-auth `ray start --head`.

One cluster serves the module. Two real runs of `python -m service.train` go through the
client: a smoke run watched to the end, and a longer one that is stopped mid-way. Tests run
on this machine, so they may also read the run directories they chose under tmp.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from dashboard_series import dashboard_series
from ray.job_submission import JobSubmissionClient
from ray_head import RayHead

from actors.metric_names import episode_series
from actors.run.metrics import EVAL_GAUGES, STEPS_COUNTER
from service.client import (
    ClientError,
    RunState,
    RunStatus,
    RunTimeout,
    TrainingClient,
    Unauthorized,
    UnknownRun,
)
from service.client.cli import main
from service.client.submission import UPLOAD_EXCLUDES
from service.progress import PROGRESS_PREFIX, SUMMARY_PREFIX, last_record

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 240.0
METRICS_TIMEOUT_S = 45.0


@dataclass
class WatchedRun:
    run_id: str
    run_dir: Path
    seen: list[RunStatus]  # every status polled while it ran
    final: RunStatus
    metrics_text: str  # the node's Prometheus export, read as soon as the run ended


def _unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def _watch(client: TrainingClient, run_id: str, timeout_s: float) -> tuple[list[RunStatus], RunStatus]:
    seen, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = client.status(run_id)
        seen.append(status)
        if status.state.is_terminal():
            return seen, status
        time.sleep(1.0)
    raise AssertionError(f"run {run_id} did not end within {timeout_s}s; last status {seen[-1]}")


def _expected_series() -> set[str]:
    """Prometheus names every run exports (Ray adds `ray_`, and `_total` to counters)."""
    names = {f"ray_{STEPS_COUNTER[0]}_total", "ray_grpo_step", "ray_grpo_loss", "ray_grpo_reward_mean"}
    names |= {f"ray_{name}" for name, _ in EVAL_GAUGES.values()}
    return names - episode_series()  # a smoke run has no episodes


def _series_of_run(metrics_text: str, run_id: str) -> set[str]:
    tag = f'run_id="{run_id}"'
    return {
        line.split("{", 1)[0]
        for line in metrics_text.splitlines()
        if not line.startswith("#") and tag in line
    }


def _scrape_until_exported(metrics_url: str, run_id: str) -> str:
    """Ray exports metrics every few seconds and drops a dead actor's gauges ~20 s later: poll now."""
    text, deadline = "", time.monotonic() + METRICS_TIMEOUT_S
    while time.monotonic() < deadline:
        with urllib.request.urlopen(metrics_url, timeout=5) as response:
            text = response.read().decode()
        if _expected_series() <= _series_of_run(text, run_id):
            break
        time.sleep(1.0)
    return text


@pytest.fixture(scope="module")
def client(ray_token_head: RayHead) -> TrainingClient:
    return TrainingClient(ray_token_head.address, token=ray_token_head.token, timeout_s=30)


@pytest.fixture(scope="module")
def raw_jobs(ray_token_head: RayHead) -> JobSubmissionClient:
    """Ray's own SDK, to look behind the client and to submit jobs that are not training runs."""
    return JobSubmissionClient(
        ray_token_head.address, headers={"Authorization": f"Bearer {ray_token_head.token}"}
    )


@dataclass
class CliSubmission:
    process: subprocess.Popen
    output: Path  # its stdout and stderr (a file, not a pipe: a full pipe would block it)
    run_dir: Path


@pytest.fixture(scope="module")
def cli_submission(ray_token_head: RayHead, tmp_path_factory) -> Iterator[CliSubmission]:
    """`ray job submit --working-dir . -- python -m service.train --preset smoke`, started in the background."""
    root = tmp_path_factory.mktemp("cli")
    command = [
        sys.executable, "-m", "ray.scripts.scripts", "job", "submit", "--address", ray_token_head.address,
        "--working-dir", ".", "--runtime-env-json", json.dumps({"excludes": list(UPLOAD_EXCLUDES)}),
        "--", "python", "-m", "service.train", "--preset", "smoke", "--run-dir", str(root / "run"),
    ]  # fmt: skip
    with open(root / "output.txt", "w") as output:
        process = subprocess.Popen(
            command, cwd=REPO, env=ray_token_head.client_env(), stdout=output, stderr=subprocess.STDOUT
        )
    yield CliSubmission(process, root / "output.txt", root / "run")
    if process.poll() is None:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def smoke_run(
    client: TrainingClient, ray_token_head: RayHead, cli_submission: CliSubmission, tmp_path_factory
) -> WatchedRun:
    """A smoke run through the client, watched to its end (the CLI's run, started first, overlaps it)."""
    run_dir = tmp_path_factory.mktemp("smoke") / "run"
    # A named wait policy on a cluster joined reaches the trainer workers through their runtime_env,
    # merged with the job's (its uploaded working_dir still imports).
    run_id = client.submit(
        preset="smoke", run_id=_unique("smoke"), run_dir=run_dir, working_dir=REPO,
        overrides=["scaling.omp_wait_policy=passive"],
    )  # fmt: skip
    seen, final = _watch(client, run_id, RUN_TIMEOUT_S)
    metrics_text = _scrape_until_exported(ray_token_head.metrics_url, run_id)
    return WatchedRun(run_id, run_dir, seen, final, metrics_text)


def test_client_watches_a_smoke_run_through_its_phases_to_success(smoke_run: WatchedRun):
    final = smoke_run.final
    assert final.state is RunState.SUCCEEDED, final.error
    assert final.step == final.total_steps and final.total_steps > 0
    assert "loss" in final.metrics and "exact_match" in final.eval_metrics and final.error is None
    assert final.final_eval is not None and "exact_match" in final.final_eval
    running = [status for status in smoke_run.seen if status.state is RunState.RUNNING and status.step]
    assert running, "no progress line was seen while the run was RUNNING"
    steps = [status.step for status in running]
    assert steps == sorted(steps) and {status.phase for status in running} <= {"sft", "grpo", "eval"}
    assert all(status.eta_s is None or status.eta_s >= 0 for status in running)  # None until it can tell


def test_run_directory_holds_the_records(smoke_run: WatchedRun):
    summary = json.loads((smoke_run.run_dir / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["steps"] == smoke_run.final.total_steps
    runtime = json.loads((smoke_run.run_dir / "runtime.json").read_text())
    assert runtime["OMP_WAIT_POLICY"] == "PASSIVE", runtime
    assert (
        runtime["omp_wait_policy_from"]
        == "scaling.omp_wait_policy=passive (the trainer workers' runtime_env)"
    )


def test_logs_whole_and_followed(client: TrainingClient, smoke_run: WatchedRun):
    text = client.logs(smoke_run.run_id)
    assert last_record(text, SUMMARY_PREFIX)["status"] == "succeeded"
    followed = "".join(client.logs(smoke_run.run_id, follow=True))  # a finished run: all of it, then the end
    assert last_record(followed, SUMMARY_PREFIX)["status"] == "succeeded"


def test_run_metrics_reach_the_nodes_prometheus_export(smoke_run: WatchedRun):
    exported = _series_of_run(smoke_run.metrics_text, smoke_run.run_id)
    missing = _expected_series() - exported
    assert not missing, f"not exported with run_id={smoke_run.run_id}: {sorted(missing)}"


def test_list_shows_only_this_services_runs(client: TrainingClient, smoke_run: WatchedRun, raw_jobs):
    foreign = raw_jobs.submit_job(entrypoint="echo not-a-training-run")  # a job without the service tag
    runs = {run.run_id: run for run in client.list()}
    assert smoke_run.run_id in runs and foreign not in runs
    assert runs[smoke_run.run_id].state is RunState.SUCCEEDED and runs[smoke_run.run_id].preset == "smoke"


def test_a_foreign_job_id_is_not_taken_for_a_run(client: TrainingClient, raw_jobs):
    foreign = raw_jobs.submit_job(entrypoint="echo not-a-training-run", submission_id=_unique("foreign"))
    with pytest.raises(ClientError, match="not a training run"):
        client.submit(preset="smoke", run_id=foreign, working_dir=REPO)


def _submit_twice_at_once(clients: list[TrainingClient], run_id: str, run_dir: Path) -> list[str]:
    """Two submitters race for one id (separate clients, as from two laptops)."""
    kwargs = dict(
        preset="smoke", overrides=["grpo.steps=400"], run_id=run_id, run_dir=run_dir, working_dir=REPO
    )
    with ThreadPoolExecutor(len(clients)) as pool:
        return [future.result() for future in [pool.submit(c.submit, **kwargs) for c in clients]]


def test_stop_a_longer_run_after_resubmitting_its_id(
    client: TrainingClient, raw_jobs, ray_token_head: RayHead, tmp_path: Path
):
    run_dir, run_id = tmp_path / "long", _unique("long")
    other_client = TrainingClient(ray_token_head.address, token=ray_token_head.token)
    assert _submit_twice_at_once([client, other_client], run_id, run_dir) == [run_id, run_id]
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while (status := client.status(run_id)).step is None:
        assert not status.state.is_terminal() and time.monotonic() < deadline, status
        time.sleep(0.5)
    started = raw_jobs.get_job_info(run_id).start_time
    # The same id again while it runs: the same run comes back; nothing new starts, it keeps going.
    assert client.submit(preset="smoke", run_id=run_id, working_dir=REPO) == run_id
    assert raw_jobs.get_job_info(run_id).start_time == started
    assert [job.submission_id for job in raw_jobs.list_jobs()].count(run_id) == 1
    with pytest.raises(RunTimeout, match=f"run '{run_id}' still RUNNING after waiting 1s") as caught:
        client.wait(run_id, timeout_s=1, poll_s=0.2)
    assert caught.value.status.state is RunState.RUNNING and caught.value.status.step is not None

    assert client.stop(run_id) is True
    final = client.wait(run_id, timeout_s=120, poll_s=0.5)
    assert final.state is RunState.STOPPED
    assert final.step is not None and final.step < final.total_steps
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["status"] == "stopped"
    # the status and the step its figures come from are the summary's
    assert final.step == final.metrics_step == saved["steps"]
    assert last_record(client.logs(run_id), SUMMARY_PREFIX)["status"] == "stopped"
    assert client.stop(run_id) is False  # already over


@pytest.fixture
def no_local_token(tmp_path: Path, monkeypatch):
    """Neither environment nor ~/.ray holds a token (a developer's own must not leak in)."""
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


def test_request_without_a_token_is_refused_as_missing(ray_token_head: RayHead, no_local_token):
    with pytest.raises(Unauthorized, match="refused the request: auth token missing") as caught:
        TrainingClient(ray_token_head.address).list()
    assert caught.value.token_sent is False


def test_request_with_a_wrong_token_is_refused_as_rejected(ray_token_head: RayHead, no_local_token):
    with pytest.raises(Unauthorized, match="refused the request: auth token rejected") as caught:
        TrainingClient(ray_token_head.address, token="not-the-token").status("anything")
    assert caught.value.token_sent is True


def test_token_from_the_environment_is_used(ray_token_head: RayHead, no_local_token, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_TOKEN", ray_token_head.token)
    assert isinstance(TrainingClient(ray_token_head.address).list(), list)


def test_unknown_run(client: TrainingClient):
    for call in (client.status, client.stop, client.logs, lambda run_id: client.logs(run_id, follow=True)):
        with pytest.raises(UnknownRun, match="no run 'no-such-run'"):
            call("no-such-run")


def test_cli_status_list_wait_and_errors(
    ray_token_head: RayHead, smoke_run: WatchedRun, capsys, no_local_token
):
    connect = ["--address", ray_token_head.address, "--token", ray_token_head.token]
    assert main(["status", smoke_run.run_id, "--json", *connect]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "SUCCEEDED"
    assert main(["list", *connect]) == 0
    assert smoke_run.run_id in capsys.readouterr().out
    assert main(["wait", smoke_run.run_id, "--timeout", "30", *connect]) == 0
    assert "SUCCEEDED" in capsys.readouterr().out
    assert main(["logs", smoke_run.run_id, *connect]) == 0
    assert last_record(capsys.readouterr().out, SUMMARY_PREFIX)["status"] == "succeeded"
    assert main(["status", "no-such-run", *connect]) == 5
    assert main(["list", "--address", ray_token_head.address]) == 4
    assert main(["list", "--address", ray_token_head.address, "--token", "wrong"]) == 4
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and "no run 'no-such-run'" in err[0]
    assert "auth token missing" in err[1] and "auth token rejected" in err[2]


def test_ray_job_submit_runs_the_smoke_preset(cli_submission: CliSubmission):
    """The documented `ray job submit` command (docs/guides/observability.md), with the token in the environment as a user has it."""
    returncode = cli_submission.process.wait(timeout=RUN_TIMEOUT_S)
    output = cli_submission.output.read_text()
    assert returncode == 0, output[-4000:]
    assert last_record(output, SUMMARY_PREFIX)["status"] == "succeeded"
    assert json.loads((cli_submission.run_dir / "summary.json").read_text())["status"] == "succeeded"


def test_cli_status_watch_logs_for_people_and_the_runs_pool_health(
    ray_token_head: RayHead, smoke_run: WatchedRun, capsys, no_local_token
):
    connect = ["--address", ray_token_head.address, "--token", ray_token_head.token]
    assert main(["status", smoke_run.run_id, "--watch", "0.5", *connect]) == 0  # ended: one frame
    frame = capsys.readouterr().out
    assert frame.startswith(f"{smoke_run.run_id} at ") and "(the run has ended)" in frame
    assert "pool.workers" in frame and "1 of 1 alive" in frame and "eval.exact_match" in frame
    assert main(["logs", smoke_run.run_id, *connect]) == 0
    shown = capsys.readouterr().out
    assert "[eval] step" in shown and PROGRESS_PREFIX not in shown
    assert main(["logs", smoke_run.run_id, "--raw", *connect]) == 0
    assert PROGRESS_PREFIX in capsys.readouterr().out


def test_the_dashboards_series_of_a_clean_run_are_exported(smoke_run: WatchedRun):
    """What a fault-free run exports. The fault counters, and the pool's gauges and wait histogram
    (kept by the trainer's process, gone with the run), are checked on a live pool in test_dashboard.py."""
    checked_elsewhere = {
        "ray_grpo_skipped_steps_total", "ray_reward_pool_errors_total", "ray_reward_pool_timeouts_total",
        "ray_reward_pool_retries_total", "ray_reward_pool_worker_restarts_total",
        "ray_reward_pool_items_per_s", "ray_reward_pool_queue_depth", "ray_reward_pool_wait_s_bucket",
    }  # fmt: skip
    run_series = dashboard_series() - checked_elsewhere - episode_series()  # a smoke run has no episodes
    missing = run_series - _series_of_run(smoke_run.metrics_text, smoke_run.run_id)
    assert not missing, f"queried by the dashboard, not exported by run {smoke_run.run_id}: {sorted(missing)}"
