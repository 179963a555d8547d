"""Scoring a batch whose user rewards wait rather than compute (an HTTP verifier, an LLM judge).

    results = await score_batch_concurrent(scorer, completions, targets, fields,
                                           concurrency=32, item_timeout_s=5.0, executor=pool)

Up to `concurrency` items are in flight at once: their `async def` rewards are awaited on the
running event loop, and rewards marked `threads` run on `executor`'s threads. Each item has its
own deadline: an item whose waiting rewards have not all answered within `item_timeout_s` gets
status `timeout` (with `timeout_reason`) and the batch goes on. A reward stuck in a thread cannot
be stopped from here; the caller's harder deadline (the pool's, which kills the worker) covers it.
The rest of an item (built-in components, plain rewards) is scored as `Scorer.score` scores it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

from rewards.result import TIMEOUT, ScoreResult
from rewards.scorer import Fields, Scorer, UserReward, UserRewardError, checked_value, user_args


async def score_batch_concurrent(
    scorer: Scorer,
    completions: Sequence[Any],
    targets: Sequence[Any],
    fields: Sequence[Fields] | None,
    *,
    concurrency: int,
    item_timeout_s: float,
    executor: Executor | None = None,
    timeout_reason: str = "",
) -> list[ScoreResult]:
    """Results of every item, in order, equal to `scorer.score` item by item except for timeouts."""
    if len(completions) != len(targets) or (fields is not None and len(fields) != len(completions)):
        raise ValueError("score_batch_concurrent needs one target (and one field row) per completion")
    rows = [None] * len(completions) if fields is None else list(fields)
    gate = asyncio.Semaphore(concurrency)
    reason = timeout_reason or f"the reward did not answer within {item_timeout_s:g}s"

    async def one(c: Any, t: Any, f: Fields) -> ScoreResult:
        async with gate:
            try:
                done = await asyncio.wait_for(_waiting_values(scorer, c, t, f, executor), item_timeout_s)
            except TimeoutError:
                return ScoreResult.failed(TIMEOUT, reason)
            return scorer.score(c, t, f, done)

    return list(
        await asyncio.gather(*(one(c, t, f) for c, t, f in zip(completions, targets, rows, strict=True)))
    )


async def _waiting_values(
    scorer: Scorer, completion: Any, target: Any, fields: Fields, executor: Executor | None
) -> dict[str, Any]:
    """The values (or UserRewardErrors) of the item's async and threaded rewards, by name; empty
    when the item is not scored by its rewards at all (bad input, too long)."""
    if not isinstance(completion, str) or len(completion.strip()) > scorer.config.max_chars:
        return {}
    c = completion.strip()
    waiting = [u for u in scorer.user_rewards if u.concurrent]
    values = await asyncio.gather(*(_value(scorer, u, c, target, fields, executor) for u in waiting))
    return {u.name: v for u, v in zip(waiting, values, strict=True)}


async def _value(
    scorer: Scorer, user: UserReward, c: str, target: Any, fields: Fields, executor: Executor | None
) -> float | UserRewardError:
    try:
        args, kwargs = user_args(user, c, target, fields)
        fn = scorer.reward_callable(user)
        if user.is_async:
            raw = await fn(*args, **kwargs)
        else:
            call = functools.partial(fn, *args, **kwargs)
            raw = await asyncio.get_running_loop().run_in_executor(executor, call)
        return checked_value(user, raw)
    except UserRewardError as exc:
        return exc
    except Exception as exc:
        return UserRewardError(f"user reward {user.name!r} raised {type(exc).__name__}: {exc}")
