"""Exceptions of the reward pool.

RewardPoolError                 base of everything the pool raises on purpose
├── RewardErrorRateExceeded     a step's share of errored or timed-out items passed the threshold
├── RewardCollectTimeout        collect waited collect_timeout_s (also a TimeoutError)
└── RewardPoolUnavailable       workers did not start, all are dead, or the pool was shut down
"""

from __future__ import annotations


class RewardPoolError(RuntimeError):
    """Base of the reward pool's own errors."""


class RewardErrorRateExceeded(RewardPoolError):
    """Too many items of one collection errored or timed out for their rewards to be trusted."""


class RewardCollectTimeout(RewardPoolError, TimeoutError):
    """A collect did not get all results in time."""


class RewardPoolUnavailable(RewardPoolError):
    """No worker can score: they failed to start, all died, or the pool was shut down."""
