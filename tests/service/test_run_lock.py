"""`service.run_lock`: one writer per run directory, with real processes and a real flock.

Holders run as child processes (a claim, then wait on stdin), so "another process holds it" and
"its holder was SIGKILLed" are what the kernel says, not a mock.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from service import run_lock
from service.config import ConfigError, config_to_yaml, load_config
from service.run_dir import claim_run, fresh_config, resumed_config
from service.run_lock import (
    LOCK_FILE,
    RAY_JOB_CONFIG_ENV,
    Owner,
    RunDirBusy,
    check_free,
    claim_run_dir,
)

REPO = Path(__file__).resolve().parents[2]

# A child that claims argv[1] at wall time argv[2] (0: at once), says how it went, and holds the
# directory until its stdin closes.
HOLDER = """
import sys, time
from service.run_lock import RunDirBusy, claim_run_dir
start = float(sys.argv[2])
while time.time() < start:
    pass
try:
    lock = claim_run_dir(sys.argv[1], log=lambda line: print("log:", line, flush=True))
except RunDirBusy as busy:
    print("busy:", busy, flush=True)
    sys.exit(3)
print("claimed", flush=True)
sys.stdin.read()
lock.release()
"""


class Holder:
    def __init__(self, directory: Path, start_at: float = 0.0):
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(directory), repr(start_at)],
            cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.pid = self.proc.pid

    def first_line(self, timeout_s: float = 30.0) -> str:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        assert line, f"holder {self.pid} said nothing within {timeout_s:g}s"
        return line[0].strip()

    def end(self) -> int:
        if self.proc.poll() is None:
            self.proc.stdin.close()
        return self.proc.wait(timeout=30)

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def _record(directory: Path) -> Owner | None:
    return Owner.decode((directory / LOCK_FILE).read_bytes())


def test_a_claim_makes_the_directory_records_its_owner_and_release_removes_the_lock(tmp_path):
    run_dir = tmp_path / "a" / "b" / "run"
    with claim_run_dir(run_dir) as lock:
        owner = _record(run_dir)
        assert owner is not None and owner.pid == os.getpid() and owner.job is None
        assert lock.owner == owner and lock.held
        with pytest.raises(RunDirBusy, match=f"in use by a live run: pid {os.getpid()} on host "):
            claim_run_dir(run_dir)  # a second claim, even from the same process
        with pytest.raises(RunDirBusy, match=f"pid {os.getpid()}"):
            check_free(run_dir)
    assert not lock.held and not (run_dir / LOCK_FILE).exists()
    check_free(run_dir)
    claim_run_dir(run_dir).release()  # free again


def test_abandon_removes_what_the_claim_made(tmp_path):
    (tmp_path / "kept").mkdir()
    claim_run_dir(tmp_path / "kept" / "new" / "run").abandon()
    assert list(tmp_path.iterdir()) == [tmp_path / "kept"] and not any((tmp_path / "kept").iterdir())


def test_claims_at_the_same_instant_have_exactly_one_winner(tmp_path):
    run_dir = tmp_path / "run"
    start_at = time.time() + 2.0  # every child is up and spinning by then
    holders = [Holder(run_dir, start_at) for _ in range(4)]
    try:
        lines = {h.pid: h.first_line() for h in holders}
        winners = [pid for pid, line in lines.items() if line == "claimed"]
        assert len(winners) == 1, lines
        for pid, line in lines.items():
            if pid != winners[0]:
                assert line.startswith(f"busy: in use by a live run: pid {winners[0]} on host "), line
    finally:
        codes = {h.pid: h.end() for h in holders}
    assert sorted(codes.values()) == [0, 3, 3, 3]
    assert not (run_dir / LOCK_FILE).exists()


def test_the_lock_of_a_killed_holder_is_taken_over_with_a_line_naming_it(tmp_path):
    run_dir = tmp_path / "run"
    holder = Holder(run_dir)
    try:
        assert holder.first_line() == "claimed"
        with pytest.raises(RunDirBusy, match=f"pid {holder.pid} "):
            claim_run_dir(run_dir)
    finally:
        holder.kill()
    assert _record(run_dir).pid == holder.pid  # the kernel dropped its lock; its record stays
    check_free(run_dir)  # nobody holds it now
    lines: list[str] = []
    with claim_run_dir(run_dir, log=lines.append):
        assert _record(run_dir).pid == os.getpid()
    assert len(lines) == 1 and "the run that held it is gone" in lines[0]
    assert re.search(rf"\(pid {holder.pid} on host .*, started .* UTC, last heartbeat \d+ s ago\)$", lines[0])


def _foreign(directory: Path, heartbeat_age_s: float) -> Owner:
    """The record of a holder on another machine (another kernel: its flock may not reach us)."""
    now = run_lock.time.time()  # the lock's own clock, which a test may stop
    owner = Owner(
        host="gpu-node-7", pid=4242, started=now - 600, heartbeat=now - heartbeat_age_s, boot="other"
    )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / LOCK_FILE).write_bytes(owner.encode())
    return owner


def test_a_foreign_holder_with_a_fresh_heartbeat_is_alive_and_a_stale_one_is_taken_over(
    tmp_path, monkeypatch
):
    # the lock's clock stands still: the heartbeat is "3 s ago" however long the lines below take
    stopped = SimpleNamespace(time=lambda: 1.8e9, monotonic=time.monotonic, sleep=time.sleep)
    monkeypatch.setattr(run_lock, "time", stopped)
    run_dir = tmp_path / "run"
    owner = _foreign(run_dir, heartbeat_age_s=3)
    for attempt in (check_free, claim_run_dir):
        with pytest.raises(
            RunDirBusy, match="pid 4242 on host gpu-node-7, started .* last heartbeat 3 s ago"
        ) as busy:
            attempt(run_dir)
        assert "its lock lapses 60 s after its last heartbeat" in str(busy.value)
    assert _record(run_dir) == owner  # a refused claim leaves the record alone

    _foreign(run_dir, heartbeat_age_s=300)
    lines: list[str] = []
    claim_run_dir(run_dir, log=lines.append).release()
    assert len(lines) == 1 and "pid 4242 on host gpu-node-7" in lines[0] and "5 min ago" in lines[0]


def test_the_heartbeat_is_refreshed_while_held_and_names_the_ray_job(tmp_path, monkeypatch):
    config = {"runtime_env": {}, "metadata": {"job_submission_id": "raysubmit_abc123", "job_name": "x"}}
    monkeypatch.setenv(RAY_JOB_CONFIG_ENV, json.dumps(config))
    run_dir = tmp_path / "run"
    lock = claim_run_dir(run_dir, heartbeat_s=0.05)
    try:
        first = _record(run_dir)
        assert first.job == "raysubmit_abc123"
        deadline = time.monotonic() + 10
        while _record(run_dir).heartbeat == first.heartbeat and time.monotonic() < deadline:
            time.sleep(0.05)
        later = _record(run_dir)
        assert later.heartbeat > first.heartbeat and later.started == first.started
        with pytest.raises(RunDirBusy, match=r"\(Ray job raysubmit_abc123\), started "):
            check_free(run_dir)
    finally:
        lock.release()
    assert not any(t.name == "run-lock-heartbeat" for t in threading.enumerate())


# --------------------------------------------------------------------------- the run directory


def _saved_run(run_dir: Path) -> None:
    """A run that ended after its first step."""
    run_dir.mkdir(parents=True)
    cfg = load_config("smoke", overrides=["run.name=held", f"run.run_dir={run_dir}"])
    (run_dir / "config.yaml").write_text(config_to_yaml(cfg))
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "phase": "sft"}\n')


def test_a_live_run_is_refused_by_name_for_a_fresh_start_and_for_resume(tmp_path):
    run_dir = tmp_path / "run"
    _saved_run(run_dir)
    holder = Holder(run_dir)
    try:
        assert holder.first_line() == "claimed"
        with pytest.raises(ConfigError) as fresh:
            fresh_config("smoke", None, [], str(run_dir))
        assert f"run.run_dir: '{run_dir}' is in use by a live run: pid {holder.pid} on host " in str(
            fresh.value
        )
        assert "--resume" not in str(fresh.value)  # resuming a live run is no advice
        with pytest.raises(ConfigError) as resumed:
            resumed_config(None, [], str(run_dir))
        assert str(resumed.value).startswith(
            f"--resume: '{run_dir}' is in use by a live run: pid {holder.pid} "
        )
        cfg = load_config("smoke", overrides=["run.name=held", f"run.run_dir={run_dir}"])
        with pytest.raises(ConfigError) as claimed:
            claim_run(cfg, resume=True, log=print)
        assert str(claimed.value).startswith(
            f"--resume: '{run_dir}' is in use by a live run: pid {holder.pid} "
        )
        assert str(claimed.value).endswith(
            "it can be resumed once that run has ended (stop it first to resume it now)"
        )
    finally:
        holder.end()
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml", "metrics.jsonl"]


def test_an_ended_run_is_sent_to_resume_and_a_stale_lock_alone_is_no_run(tmp_path):
    run_dir = tmp_path / "run"
    holder = Holder(run_dir)
    assert holder.first_line() == "claimed"
    holder.kill()  # killed before it wrote anything: the directory holds only its lock file
    cfg = fresh_config("smoke", None, [], str(run_dir))
    lines: list[str] = []
    with claim_run(cfg, resume=False, log=lines.append):
        assert _record(run_dir).pid == os.getpid()
    assert len(lines) == 1 and f"pid {holder.pid}" in lines[0]

    _saved_run(tmp_path / "ended")
    with pytest.raises(ConfigError, match="already holds a run; pass --resume"):
        fresh_config("smoke", None, [], str(tmp_path / "ended"))
    late = load_config("smoke", overrides=[f"run.run_dir={tmp_path / 'ended'}"])
    with pytest.raises(ConfigError, match="already holds a run; pass --resume"):  # checked again, held
        claim_run(late, resume=False, log=print)
    assert not (tmp_path / "ended" / LOCK_FILE).exists()
