"""The console of real smoke runs, line by line, in a job log (a pipe) and on a terminal (a pty).

Classification rule: after ANSI codes are stripped and carriage returns split a terminal line into
its redraws, every non-blank line must be one of
    progress    `[train] run <id> in <dir>`, `[train] starting at step ...`, `[train] step ...`,
                a `[grpo-progress] {json}` record (job log only), or a frame of the live bar
                (`sft |grpo  NN%|...`; terminal only)
    evaluation  `[eval] step ...`
    warning     `[train] warning: ...` (a user must act on it; a clean run has none)
    summary     `[train] run <id> succeeded|failed|stopped: ...`, `[train] held-out ...`,
                `[train] records in ...`, `[grpo-summary] {json}` (job log only)
Anything else (Ray's own lines, a traceback, a library's banner) fails the test.
The job-log run also turns TensorBoard and W&B (offline) on and checks they hold every scalar of
metrics.jsonl, and that the metric catalogue names every key the records carry.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from wandb_records import history, offline_run_file

from actors.metric_names import RECORD_FIELDS, metric_for
from service.loggers import scalars
from service.progress import PROGRESS_PREFIX, SUMMARY_PREFIX, last_record
from service.run_files import read_jsonl
from tests.service.train_child import shared_env

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
CLASSES = {
    "progress": re.compile(
        r"^(\[train\] run \S+ in |\[train\] starting at step |\[train\] step \d+/\d+ |"
        + re.escape(PROGRESS_PREFIX)
        + r"|(sft|grpo)?\s*\d+%\|)"
    ),
    "evaluation": re.compile(r"^\[eval\] step \d+ "),
    "warning": re.compile(r"^\[train\] warning: "),
    # where rewards are scored (pool.placement: auto), one line per decision, from rank 0
    "placement": re.compile(r"^(\(RayTrainWorker pid=\d+\) )?\[placement\] "),
    "summary": re.compile(
        r"^(\[train\] run \S+ (succeeded|failed|stopped): |\[train\] held-out |\[train\] records in "
        + "|"
        + re.escape(SUMMARY_PREFIX)
        + ")"
    ),
}


def classify(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {name: [] for name in (*CLASSES, "other")}
    for raw in ANSI.sub("", text).replace("\r", "\n").splitlines():
        line = raw.strip()
        if not line:
            continue
        name = next((name for name, pattern in CLASSES.items() if pattern.match(line)), "other")
        out[name].append(line)
    return out


def _env() -> dict[str, str]:
    """On the shared Ray head, as a job's driver runs on its cluster."""
    env = shared_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _argv(run_dir: Path, *sets: str) -> list[str]:
    argv = [sys.executable, "-m", "service.train", "--preset", "smoke", "--run-dir", str(run_dir)]
    for item in sets:
        argv += ["--set", item]
    return argv


def test_a_job_log_holds_progress_evaluations_and_the_summary_only(tmp_path):
    run_dir = tmp_path / "job"
    result = subprocess.run(
        _argv(run_dir, "logging.tensorboard=true", "logging.wandb.project=grpo-test", "logging.wandb.mode=offline",
              "logging.rollouts_every=2"),
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-4000:]
    lines = classify(text)
    assert lines["other"] == [] and lines["warning"] == [], text[-4000:]
    evals = read_jsonl(run_dir / "eval.jsonl")
    assert len(lines["evaluation"]) == len(evals) == 3 and len(lines["summary"]) == 4
    assert last_record(text, SUMMARY_PREFIX)["status"] == "succeeded"
    assert last_record(text, PROGRESS_PREFIX)["phase"] == "eval"
    print(
        f"job log: {sum(len(v) for v in lines.values())} lines: "
        + ", ".join(f"{k} {len(v)}" for k, v in lines.items())
    )

    metrics = read_jsonl(run_dir / "metrics.jsonl")
    uncatalogued = {
        k for row in metrics for k in row if k not in RECORD_FIELDS and metric_for("step", k) is None
    }
    uncatalogued |= {
        k for row in evals for k in row if k not in RECORD_FIELDS and metric_for("eval", k) is None
    }
    assert uncatalogued == set(), "add these keys to actors/metric_names.py"
    expected = {(tag, row["step"]) for row in metrics for tag in scalars(row, "step")}
    reader = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    reader.Reload()
    in_tensorboard = {(tag, e.step) for tag in reader.Tags()["scalars"] for e in reader.Scalars(tag)}
    assert expected <= in_tensorboard
    recorded = sorted({row["step"] for row in read_jsonl(run_dir / "rollouts.jsonl")})
    assert [e.step for e in reader.Tensors("train/rollouts/text_summary")] == recorded and recorded
    in_wandb = {(tag, row["_step"]) for row in history(offline_run_file(run_dir)) for tag in row}
    assert expected <= in_wandb


def _read_pty(argv: list[str], timeout_s: float) -> tuple[int, str]:
    """Run `argv` on a pseudo-terminal of 120 x 30 and return (exit code, everything it wrote)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    process = subprocess.Popen(argv, cwd=REPO, env=_env(), stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    chunks, deadline = [], time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # the other side closed: the run is over
                    break
                if not data:
                    break
                chunks.append(data)
            elif process.poll() is not None:
                break
        return process.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace")
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)


def test_a_terminal_shows_a_live_bar_evaluations_and_the_summary_only(tmp_path):
    # In process (run.backend=local): the loop's lines reach the terminal through the console, not
    # Ray's log forwarding, which the job log test above goes through.
    code, text = _read_pty(_argv(tmp_path / "tty", "run.backend=local"), timeout_s=400)
    assert code == 0, text[-4000:]
    lines = classify(text)
    assert lines["other"] == [] and lines["warning"] == [], text[-4000:]
    assert PROGRESS_PREFIX.strip() not in text and SUMMARY_PREFIX.strip() not in text
    bars = [line for line in lines["progress"] if "%|" in line]
    assert bars and "10/10" in bars[-1] and "grpo" in bars[-1]
    assert len(lines["evaluation"]) == 3 and len(lines["summary"]) == 3
    # What stays on the screen: the header lines, the evaluations, the final bar, the summary.
    screen = [ln for ln in ANSI.sub("", text).splitlines() if ln.strip()]
    print(f"terminal: {len(screen)} lines on screen; {len(bars)} bar redraws")
