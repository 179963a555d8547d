"""Memory stays flat: the driver's and a reward worker's resident memory over 200 GRPO steps.

The run is the smoke model with tiny batches (4 prompts x 4 completions of <= 64 tokens a step),
one reward worker, no evaluation but the two the run always makes (GRPO start and end) and no
checkpoint before the last step, so nothing but the step loop itself runs in the window measured.
A sampler thread reads each process's RSS from /proc every 0.1 s together with the last step
printed; the baseline is the median RSS around GRPO step 20, the end value the median around
GRPO step 220.

Bound: growth <= 32 MiB per process. Measured on a 2-CPU machine: the driver ~410 MiB, +0.2 MiB;
a reward worker ~130 MiB, +1.3 MiB (its validity memo holds the distinct completions seen, at
most `task.cache_size` entries). 32 MiB is well above that and allocator noise, and well below
what a per-step leak would add over 200 steps: 160 KiB a step, e.g. keeping every step's
rollouts or records, already exceeds it.
"""

from __future__ import annotations

import statistics

import pytest
from fault_runs import DriverRun, EveryTick, driver_run, rss_bytes, summary, train_argv

pytestmark = pytest.mark.slow

SFT_STEPS = 2
GRPO_STEPS = 230
WINDOW = (20, 220)  # GRPO steps whose RSS is compared
BOUND_BYTES = 32 * 2**20
SETS = (
    f"sft.steps={SFT_STEPS}",
    "sft.batch_size=8",
    f"grpo.steps={GRPO_STEPS}",
    "grpo.prompts_per_step=4",
    "grpo.eval_every=1000",
    "sampling.group_size=4",
    "sampling.max_new_tokens=64",
    "data.eval_size=4",
    "checkpoint.every_steps=1000",
    "pool.num_workers=1",
    "pool.min_chunk_size=4",
    "run.num_cpus=4",
    "run.eval_samples=0",
    "run.log_every=1",  # the sampler reads the last step from the progress records
)


class RssSampler(EveryTick):
    """(last global step printed, driver RSS, reward worker RSS) every `every_s` seconds."""

    def __init__(self, run: DriverRun, every_s: float = 0.1):
        super().__init__(every_s, name="rss-sampler")
        self.run = run
        self.samples: list[tuple[int, int, int]] = []

    def tick(self) -> None:
        workers = self.run.ray_workers("RewardWorker")
        if len(workers) != 1:
            return
        try:
            self.samples.append((self.run.last_step(), rss_bytes(self.run.pid), rss_bytes(workers[0].pid)))
        except (OSError, ValueError):  # a process went away between the two reads
            pass

    def median_around(self, grpo_step: int, which: int, half_width: int = 10) -> float:
        step = SFT_STEPS + grpo_step
        values = [s[which] for s in self.samples if abs(s[0] - step) <= half_width]
        assert len(values) >= 3, f"only {len(values)} RSS samples near GRPO step {grpo_step}"
        return statistics.median(values)


def test_driver_and_reward_worker_memory_stay_flat_over_200_grpo_steps(fault_root):
    run_dir = fault_root / "memory"
    with driver_run(train_argv(run_dir, SETS), fault_root / "memory.log") as run:
        run.wait_for_step(SFT_STEPS, 300)
        with RssSampler(run) as sampler:
            run.wait_for_step(SFT_STEPS + WINDOW[1] + 10, 300)
        rc = run.wait(120)
    assert rc == 0 and summary(run_dir)["status"] == "succeeded"
    for which, name in ((1, "driver"), (2, "reward worker")):
        start, end = sampler.median_around(WINDOW[0], which), sampler.median_around(WINDOW[1], which)
        print(
            f"{name}: RSS {start / 2**20:.1f} MiB at GRPO step {WINDOW[0]}, {end / 2**20:.1f} MiB at {WINDOW[1]}"
        )
        assert end - start <= BOUND_BYTES, (
            f"{name} grew {(end - start) / 2**20:.1f} MiB over {WINDOW[1] - WINDOW[0]} steps"
        )
