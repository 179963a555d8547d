"""A worker's memory and output, without Ray: RSS read, output captured and capped, the RSS watch."""

from __future__ import annotations

import sys
import threading

from actors.pool.codec import decode
from actors.pool.scoring import ChunkScorer
from actors.pool.worker import RewardWorker
from actors.pool.worker_watch import (
    OUTPUT_CAP_BYTES,
    RssWatch,
    capture_output,
    output_notice,
    rss_mb,
)
from rewards import FenScorer, RewardConfig
from rewards.config import UserRewardSpec

FEN = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"
EX = "examples.rewards.misbehaving"


def test_rss_is_read_and_grows_with_what_the_process_holds():
    before = rss_mb()
    assert before is not None and before > 1
    held = b"\x01" * (64 * 1024 * 1024)
    assert rss_mb() > before + 32
    del held


def test_output_is_captured_capped_and_counted_from_threads():
    with capture_output(cap_bytes=100) as out:
        print("first line")
        threads = [threading.Thread(target=lambda: sys.stderr.write("x" * 1000)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sys.stdout is sys.__stdout__ or sys.stdout is not out  # restored
    assert out.text().startswith("first line\n") and len(out.text()) == 100
    assert out.written == len("first line\n") + 4000 and out.dropped == out.written - 100


def test_output_notice_is_one_line_with_the_first_lines_and_what_was_dropped():
    head = "".join(f"line {i}\n" for i in range(50))
    line = output_notice("reward-worker-0", head, 10_000)
    assert "\n" not in line
    assert "reward output (first lines): line 0 | line 1 | line 2 | line 3 | line 4;" in line
    shown = "\n".join(f"line {i}" for i in range(5))
    assert f"{10_000 - len(shown)} more bytes dropped" in line


def test_the_worker_returns_its_rss_and_a_capped_copy_of_what_the_reward_printed(capsys):
    worker = RewardWorker(ChunkScorer(RewardConfig(user=[UserRewardSpec(fn=f"{EX}:prints_a_lot")])))
    completions = [FEN, "junk", FEN]
    reply = worker.call(ChunkScorer.score, (completions, [FEN] * 3))
    assert [r.status for r in decode(reply.results)] == [
        r.status for r in FenScorer().score_batch(completions, [FEN] * 3)
    ]
    assert reply.worker_rss_mb and reply.worker_rss_mb > 1
    assert len(reply.output.encode()) <= OUTPUT_CAP_BYTES and reply.output.startswith("checking ")
    assert reply.output_bytes >= 3 * 1024 * 1024
    assert capsys.readouterr().out == ""  # nothing reached the process's own stdout
    quiet = RewardWorker(ChunkScorer()).call(ChunkScorer.score, ([FEN], [FEN]))
    assert quiet.output == "" and quiet.output_bytes == 0


def test_the_rss_watch_warns_once_per_worker_on_growth_or_a_steady_rise():
    watch = RssWatch(growth_mb=150, rising_steps=4)
    said = []
    # w0 leaks ~60 MB a step; w1 is flat; w2 rises a little each step for 4 steps
    for step in range(1, 9):
        said += watch.observe(
            step,
            {
                "w0": (10, 130.0 + 60 * (step - 1)),
                "w1": (11, 150.0 + (step % 2)),
                "w2": (12, 100.0 + 5 * min(step, 5)),
                "w3": (13, None),
            },
        )
    assert len(said) == 2
    w0 = next(line for line in said if "w0" in line)
    assert "grew to 310 MB RSS by step 4" in w0 and "130 -> 190 -> 250 -> 310 MB over 4 steps" in w0
    assert "pool.max_worker_rss_mb" in w0
    w2 = next(line for line in said if "w2" in line)
    assert "by step 5" in w2 and "4 rising in a row" in w2


def test_a_fresh_process_starts_a_new_series():
    watch = RssWatch(growth_mb=100, rising_steps=10, limit_mb=300)
    assert watch.observe(1, {"w": (1, 100.0)}) == []
    assert watch.observe(2, {"w": (1, 180.0)}) == []
    assert watch.observe(3, {"w": (2, 120.0)}) == []  # recycled: 120 is its new first figure
    assert watch.observe(4, {"w": (2, 200.0)}) == []
    (line,) = watch.observe(5, {"w": (2, 240.0)})
    assert "120 -> 200 -> 240" in line and "pool.max_worker_rss_mb=300 recycles it" in line


def test_the_reward_trial_captures_what_the_rewards_print(capsys):
    from service.preflight.reward_trial import TrialItem, run_trial

    scorer = FenScorer(RewardConfig(user=[UserRewardSpec(fn=f"{EX}:prints_a_lot")]))
    trial = run_trial(scorer, [TrialItem(FEN, FEN, None)] * 3, deadline_s=10.0)
    assert trial.scored == 3 and trial.output_bytes >= 4 * 1024 * 1024  # the warm-up item, then three
    assert trial.output.startswith("checking ") and len(trial.output) <= OUTPUT_CAP_BYTES
    assert capsys.readouterr().out == ""
