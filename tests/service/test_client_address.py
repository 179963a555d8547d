"""The client acts on the cluster it is given: an explicit address wins over RAY_ADDRESS, on every
command and in the Python API; JSON on failure; a server that is not a Ray dashboard in one line."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ports import closed_port_address
from ray_head import RayHead

from service.client import ConnectionFailed, TrainingClient, UnknownRun
from service.client._jobs import JobsApi
from service.client.auth import resolve_token
from service.client.cli import main
from service.client.submission import SERVICE_TAG

REPO = Path(__file__).resolve().parents[2]
RUN_ID = "address-check-1"


@pytest.fixture(scope="module")
def live_run(ray_token_head: RayHead) -> Iterator[RayHead]:
    """A tiny tagged job on the live head (submitted with the variables cleared)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
            mp.delenv(name, raising=False)
        api = JobsApi(ray_token_head.address, token=resolve_token(ray_token_head.token), timeout_s=30)
        deadline = time.monotonic() + 120
        while True:  # a fresh head's job agent may take a while to come up on a loaded machine
            try:
                api.submit_job(
                    entrypoint="echo address-check-output",
                    submission_id=RUN_ID,
                    metadata={"service": SERVICE_TAG, "run_id": RUN_ID, "preset": "smoke"},
                )
                break
            except RuntimeError as error:
                if "No available agent" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(1)
    yield ray_token_head


@pytest.fixture
def dead_env(monkeypatch: pytest.MonkeyPatch) -> str:
    """RAY_ADDRESS and RAY_API_SERVER_ADDRESS point at a port nothing listens on."""
    dead = closed_port_address()
    monkeypatch.setenv("RAY_ADDRESS", dead)
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", dead)
    return dead


def _cli(head: RayHead, *words: str) -> list[str]:
    return [*words, "--address", head.address, "--token", head.token, "--json"]


def test_every_command_uses_the_explicit_address(live_run: RayHead, dead_env: str, capsys):
    head = live_run
    assert main(_cli(head, "wait", RUN_ID, "--timeout", "120", "--poll", "0.5")) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "SUCCEEDED"
    assert main(_cli(head, "list")) == 0
    assert RUN_ID in [run["run_id"] for run in json.loads(capsys.readouterr().out)]
    assert main(_cli(head, "status", RUN_ID)) == 0
    assert json.loads(capsys.readouterr().out)["run_id"] == RUN_ID
    assert main(_cli(head, "logs", RUN_ID)) == 0
    assert "address-check-output" in json.loads(capsys.readouterr().out)["logs"]
    assert main(_cli(head, "stop", RUN_ID)) == 0
    assert json.loads(capsys.readouterr().out)["stop_requested"] is False  # it had ended
    submit = ["submit", "--run-id", RUN_ID, "--preset", "smoke", "--working-dir", str(REPO)]
    assert main(_cli(head, *submit)) == 0  # an existing id: found on the live head, not resubmitted
    assert json.loads(capsys.readouterr().out) == {"run_id": RUN_ID, "address": head.address}


def test_python_api_uses_its_address(live_run: RayHead, dead_env: str):
    client = TrainingClient(live_run.address, token=live_run.token)
    assert client.address == live_run.address
    assert RUN_ID in [run.run_id for run in client.list()]


def test_both_dead_names_the_explicit_address_and_prints_json(dead_env: str, capsys):
    named = closed_port_address()
    assert main(["list", "--address", named, "--json", "--request-timeout", "5"]) == 3
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and named in captured.err and dead_env not in captured.err
    failure = json.loads(captured.out)
    assert failure["exit_code"] == 3 and named in failure["error"]


def test_json_on_a_usage_error(capsys):
    assert main(["status", "--json"]) == 2  # no run id
    assert json.loads(capsys.readouterr().out)["exit_code"] == 2


class _NotRay(http.server.BaseHTTPRequestHandler):
    """Answers every GET with 200: JSON that looks like Ray's version but lists junk, or HTML."""

    html = False

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.html:
            body, kind = b"<html>hello</html>", "text/html"
        elif self.path.startswith("/api/version"):
            body, kind = b'{"ray_version": "2.60.0"}', "application/json"
        else:
            body, kind = b'["not", "jobs"]', "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("html", [False, True])
def test_a_server_that_is_not_ray_is_one_line(html: bool, capsys):
    handler = type("Handler", (_NotRay,), {"html": html})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"http://127.0.0.1:{server.server_port}"
        assert main(["list", "--address", address, "--request-timeout", "5"]) == 3
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is not a Ray dashboard" in err and "BaseHTTP" in err
        with pytest.raises(ConnectionFailed, match="not a Ray dashboard"):
            TrainingClient(address, timeout_s=5).list()
    finally:
        server.shutdown()


@pytest.mark.slow  # a job uploading the checkout and starting the trainer
def test_resume_submits_a_new_job_that_continues_the_run(live_run: RayHead, dead_env: str):
    client = TrainingClient(live_run.address, token=live_run.token)
    with pytest.raises(UnknownRun):
        client.resume("no-such-run", working_dir=REPO)
    # RUN_ID has ended; its resume is a new job running the trainer with --resume and the run's name.
    job_id = client.resume(RUN_ID, overrides=["grpo.steps=9"], working_dir=REPO)
    assert job_id == f"{RUN_ID}.resume1"
    final = client.wait(job_id, timeout_s=300, poll_s=1)
    info = JobsApi(live_run.address, token=resolve_token(live_run.token), timeout_s=30).get_job_info(job_id)
    assert info.entrypoint.startswith("python -m service.train --resume --set grpo.steps=9 --set run.name=")
    assert info.metadata["resumes"] == RUN_ID and info.metadata["service"] == SERVICE_TAG
    # That run never wrote a directory here: the trainer itself refuses, exit 2, in one line.
    assert final.state.value == "FAILED"
    assert "--resume:" in client.logs(job_id) and "holds no config.yaml" in client.logs(job_id)
    assert client.resume(RUN_ID, working_dir=REPO) == f"{RUN_ID}.resume2"
