"""The reward pool: named CPU actors that run `call(fn, items)` in chunks, with deadlines, statuses,
kill-and-replace, recycling and re-dispatch; scoring and environment episodes are its two clients.

    from actors.pool import RewardPool, PoolConfig
    pool = RewardPool.create(scorer, PoolConfig(num_workers=2), run_id="run-1")   # scoring
    workers = WorkerPool.create(EpisodeServer(env, max_turns=6), cfg)              # episodes
    host = PoolEpisodes(lambda: workers, max_turns=6)

Names are imported on first use, so `actors.pool.config` (read when a config is validated) does
not import Ray.
"""

from __future__ import annotations

from actors.lazy import lazy_exports

_EXPORTS = {
    "PoolConfig": "actors.pool.config",
    "worker_name": "actors.pool.config",
    "max_runs_per_item": "actors.pool.config",
    "poison_item_bound_s": "actors.pool.config",
    "WorkerPool": "actors.pool.worker_pool",
    "RewardPool": "actors.pool.reward_pool",
    "PoolEpisodes": "actors.pool.episodes",
    "RewardWorker": "actors.pool.worker",
    "Reply": "actors.pool.worker",
    "ChunkScorer": "actors.pool.scoring",
    "Ticket": "actors.pool.work",
    "Failed": "actors.pool.work",
    "EncodedResults": "actors.pool.codec",
    "PoolMetrics": "actors.pool.metrics",
    "RewardPoolError": "actors.pool.errors",
    "RewardErrorRateExceeded": "actors.pool.errors",
    "RewardCollectTimeout": "actors.pool.errors",
    "RewardPoolUnavailable": "actors.pool.errors",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
