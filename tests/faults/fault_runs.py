"""Driver runs for the fault tests: `python -m service.train` as a subprocess in a session of its own.

Each run starts its own embedded Ray (no RAY_ADDRESS), so the processes of one run are exactly
the processes of its session: the tests find a run's Ray Train worker or reward workers there,
and teardown kills that session's process groups and nothing else (never `ray stop`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import safetensors.torch

REPO = Path(__file__).resolve().parents[2]

# One small run shape shared by the fault tests, so a fault-free run is the reference of the others.
# Dropout > 0 makes the training forward draw from torch's global RNG: an exact resume then needs
# the RNG state restored, not only the weights and the data position.
FAULT_SETS: tuple[str, ...] = (
    "model.dropout=0.1",
    "data.eval_size=8",
    "sft.steps=4",
    "sft.batch_size=8",
    "grpo.steps=64",
    "grpo.prompts_per_step=4",
    "grpo.eval_every=1000",  # evaluations at the GRPO start and the last step only
    "sampling.group_size=4",
    "sampling.max_new_tokens=64",
    "checkpoint.every_steps=2",
    "checkpoint.keep_last=3",
    "pool.num_workers=2",
    "pool.cpus_per_worker=0.5",
    "pool.min_chunk_size=4",
    "pool.placement=pool",  # the faults under test are the reward workers': score every step there
    "run.num_cpus=4",
    "run.eval_samples=0",
    "logging.rollouts_every=8",  # training completions too: a resumed run must write the same
)
FAULT_TOTAL_STEPS = 4 + 64


def fault_sets(data_path: Path, *more: str) -> tuple[str, ...]:
    """FAULT_SETS reading its training pairs from a JSON-lines file, plus `more` overrides."""
    return (*FAULT_SETS, "task.source=jsonl", f"task.path={data_path}", *more)


# Keys of a metrics.jsonl row that measure time or the reward pool's own fault handling; the
# rest must not depend on how (or whether) a run was interrupted.
VOLATILE_KEYS = frozenset(
    {
        "time",
        "step_time_s",
        "sample_s",
        "ref_s",
        "reward_wait_s",
        "update_s",
        "completions_per_s",
        "scorer_reward_wait_s",
        "scorer_reward_items_per_s",
        "scorer_reward_retries",
        "scorer_reward_deadline_kills",
        "scorer_worker_restarts",
        "scorer_worker_recycled",
        "pool_worker_rss_mb_max",  # a process's memory: the machine's, not the run's
        "eval_time_s",
    }
)
PROGRESS_STEP = re.compile(r'^\[grpo-progress\] .*"step":(\d+),.*"phase":"(sft|grpo)"')


@dataclass(frozen=True)
class TrainFile:
    path: Path
    good: int  # valid lines
    bad: int  # malformed lines (blank lines are neither)


@dataclass(frozen=True)
class FinishedRun:
    run_dir: Path
    returncode: int
    output: str


def write_jsonl_with_garbage(path: Path, good: int = 80) -> tuple[int, int]:
    """A training file of `good` valid pairs and 12 held-out ones, with bad lines between them;
    returns (valid pairs, bad lines).

    The bad lines: broken JSON, bytes that are not UTF-8, a raw NUL, an array, a missing or
    non-string field, and one line of 1 MB; blank lines are neither.
    """
    from trainer.data.chess_games import eval_pairs, generate_pairs

    bad_lines = [
        b'{"prompt": "e4", "target": ',
        b"\xff\xfe not utf-8 \x80",
        b'{"prompt": "e4\x00", "target": "x"}',
        b'["e4", "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"]',
        b'{"prompt": "e4"}',
        b'{"prompt": 4, "target": "x"}',
        b"garbage " * 131072,
    ]
    lines: list[bytes] = []
    for i, pair in enumerate(generate_pairs(good, seed=7, min_plies=1, max_plies=2)):
        lines.append(json.dumps({"prompt": pair.prompt, "target": pair.target}).encode())
        if i % 10 == 0:
            lines.append(bad_lines[(i // 10) % len(bad_lines)])
        if i % 25 == 0:
            lines.append(b"   ")
    # the held-out set is drawn from the file's own held-out positions: give it some
    held_out = eval_pairs(12, eval_seed=1_000_003, min_plies=1, max_plies=2)
    lines += [json.dumps({"prompt": p.prompt, "target": p.target}).encode() for p in held_out]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return good + len(held_out), sum(1 for i in range(good) if i % 10 == 0)


def clean_env() -> dict[str, str]:
    """This environment without any Ray address or auth settings (the run starts its own Ray)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return env


def train_argv(run_dir: Path, sets: Sequence[str], *, resume: bool = False) -> list[str]:
    argv = [sys.executable, "-m", "service.train", "--run-dir", str(run_dir)]
    if resume:
        argv.append("--resume")
    else:
        argv += ["--preset", "smoke"]
    for item in sets:
        argv += ["--set", item]
    return argv + ["--set", "run.log_interval_s=0"]  # a progress record per step: the tests follow them


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    pgrp: int
    session: int
    started_s: float  # seconds after boot
    cmdline: str  # Ray workers show their actor class here ("ray::RewardWorker.call")

    def age_s(self) -> float:
        return float(Path("/proc/uptime").read_text().split()[0]) - self.started_s


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def live_processes() -> list[ProcInfo]:
    """Every non-zombie process, read from /proc (Linux)."""
    found = []
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_path.read_text()
            cmdline = (stat_path.parent / "cmdline").read_bytes()
        except OSError:
            continue  # exited while we looked
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        if fields[0] != "Z":
            found.append(
                ProcInfo(
                    pid=int(stat_path.parent.name),
                    pgrp=int(fields[2]),
                    session=int(fields[3]),
                    started_s=int(fields[19]) / _CLOCK_TICKS,
                    cmdline=cmdline.replace(b"\0", b" ").decode(errors="replace").strip(),
                )
            )
    return found


class EveryTick:
    """A daemon thread that calls `tick()` every `every_s` seconds while the `with` block runs
    (the fault tests' samplers and killers); the block's end stops and joins it."""

    def __init__(self, every_s: float, name: str):
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.tick()

    def tick(self) -> None:
        raise NotImplementedError


class RewardWorkerKiller(EveryTick):
    """SIGKILLs one of a run's reward worker processes every `kill_every_s` (looking every 0.1 s),
    in turn, choosing only processes that have been up for at least `min_uptime_s`."""

    def __init__(self, run, kill_every_s: float, min_uptime_s: float):
        super().__init__(0.1, name="reward-worker-killer")
        self.run, self.kill_every_s, self.min_uptime_s = run, kill_every_s, min_uptime_s
        self.kills: list[tuple[int, int]] = []  # (pid, last step printed)
        self._last_kill, self._turn = 0.0, 0

    def tick(self) -> None:
        if time.monotonic() - self._last_kill < self.kill_every_s:
            return
        workers = sorted(self.run.ray_workers("RewardWorker"), key=lambda p: p.pid)
        ready = [p.pid for p in workers if p.age_s() >= self.min_uptime_s]
        if not ready:
            return
        victim = ready[self._turn % len(ready)]
        self._turn += 1
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            return
        self._last_kill = time.monotonic()
        self.kills.append((victim, self.run.last_step()))


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"process {pid} reports no VmRSS")


class DriverRun:
    """One `python -m service.train` process: its output lines as they come, its session's processes.

    Its output is also written to `log_path`, each line prefixed with the seconds since the start.
    """

    def __init__(self, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None):
        self.argv = list(argv)
        self.lines: list[str] = []
        self.started_at = time.monotonic()
        self._last_step = 0
        self._new_line = threading.Condition()
        self._log = open(log_path, "w", encoding="utf-8")  # closed by the reader thread
        self.proc = subprocess.Popen(
            self.argv,
            cwd=REPO,
            env=clean_env() if env is None else env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        self.pid = self.proc.pid
        self._reader = threading.Thread(target=self._read, name="driver-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(f"{time.monotonic() - self.started_at:8.2f} {line}")
            self._log.flush()
            step = PROGRESS_STEP.search(line)
            with self._new_line:
                self.lines.append(line.rstrip("\n"))
                if step:
                    self._last_step = max(self._last_step, int(step.group(1)))
                self._new_line.notify_all()
        self._log.close()
        with self._new_line:
            self._new_line.notify_all()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def last_step(self) -> int:
        """The highest global step whose progress line has been printed."""
        return self._last_step

    def wait_for_step(self, step: int, timeout_s: float) -> None:
        """Until the progress line of global step `step` (or a later one) is printed; fails if the
        run ends or the time runs out first."""
        deadline = time.monotonic() + timeout_s
        with self._new_line:
            while self._last_step < step:
                if not self._reader.is_alive():
                    raise AssertionError(f"run ended before step {step}:\n{self.tail()}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no step {step} within {timeout_s:g}s:\n{self.tail()}")
                self._new_line.wait(min(remaining, 1.0))

    def wait(self, timeout_s: float) -> int:
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"run did not finish within {timeout_s:g}s:\n{self.tail()}") from None
        self._reader.join(timeout=10)
        return rc

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.lines[-lines:])

    def session_processes(self) -> list[ProcInfo]:
        """Live processes of this run's session: the driver, its Ray node and Ray's workers."""
        return [p for p in live_processes() if p.session == self.pid]

    def ray_workers(self, class_name: str) -> list[ProcInfo]:
        """This run's Ray worker processes whose title names `class_name` (e.g. RewardWorker)."""
        return [p for p in self.session_processes() if p.pid != self.pid and class_name in p.cmdline]

    def kill_session(self) -> None:
        """SIGKILL every process group of this run's session (the run's own processes only)."""
        for _ in range(3):
            groups = {p.pgrp for p in self.session_processes()}
            if not groups:
                break
            for group in groups:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)
            time.sleep(0.3)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


@contextlib.contextmanager
def driver_run(argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> Iterator[DriverRun]:
    """A DriverRun (in `env`, default: its own embedded Ray) whose session is killed on the way out."""
    run = DriverRun(argv, log_path, env)
    try:
        yield run
    finally:
        run.kill_session()


def run_to_end(argv: Sequence[str], log_path: Path, timeout_s: float = 240.0) -> tuple[int, str]:
    """Run a driver to its end: (exit code, output)."""
    with driver_run(argv, log_path) as run:
        rc = run.wait(timeout_s)
        return rc, run.output


# --------------------------------------------------------------------------- run directory


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def stable_rows(run_dir: Path, name: str = "metrics.jsonl") -> list[dict[str, Any]]:
    """Rows of metrics.jsonl (or eval.jsonl) without the timing and fault-handling keys."""
    return [{k: v for k, v in row.items() if k not in VOLATILE_KEYS} for row in read_rows(run_dir / name)]


def summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def checkpoint_steps(run_dir: Path) -> list[int]:
    """Steps of the `step_*` checkpoint directories, oldest first."""
    return sorted(int(p.name.removeprefix("step_")) for p in (run_dir / "checkpoints").glob("step_*"))


def final_weights(run_dir: Path, step: int) -> dict[str, Any]:
    """The policy weights saved in the checkpoint of `step`."""
    return safetensors.torch.load_file(run_dir / "checkpoints" / f"step_{step:06d}" / "model.safetensors")


def assert_same_weights(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert bool((a[name] == b[name]).all()), f"weight {name} differs"


def first_difference(a: list[Any], b: list[Any]) -> str:
    """A short description of where two lists of rows first differ ('' when equal)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y and not (isinstance(x, dict) and isinstance(y, dict)):
            return f"row {i}: {x!r} != {y!r}"
        if x != y:
            keys = sorted(k for k in x.keys() | y.keys() if x.get(k) != y.get(k))
            return f"row {i} (step {x.get('step')}): {[(k, x.get(k), y.get(k)) for k in keys[:6]]}"
    return "" if len(a) == len(b) else f"lengths {len(a)} != {len(b)}"
