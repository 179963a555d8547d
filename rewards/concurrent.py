"""Scoring a batch whose user rewards wait rather than compute (an HTTP verifier, an LLM judge).

    results = await score_batch_concurrent(scorer, completions, targets, fields,
                                           concurrency=32, item_timeout_s=5.0, executor=pool)

Up to `concurrency` items are in flight at once: their `async def` rewards are awaited on the
running event loop, and rewards marked `threads` run on `executor`'s threads. Each item has its
own deadline: an item whose waiting rewards have not all answered within `item_timeout_s` gets
status `timeout` (with `timeout_reason`) and the batch goes on. A reward stuck in a thread cannot
be stopped from here; the caller's harder deadline (the pool's, which kills the worker) covers it.
The rest of an item (built-in components, plain rewards) is scored as `Scorer.score` scores it.
A TRL-style reward (`rewards.styles`) is called once for the whole batch first, under the same
deadline (past it, every item it was to score gets `timeout`); its values reach each item's score
as the waiting rewards' values do.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

from rewards.result import TIMEOUT, ScoreResult
from rewards.reward_log import place_extras
from rewards.scorer import Scorer
from rewards.user_reward import Fields, UserReward, UserRewardError


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

    batch = await _batch_values(scorer, list(completions), list(targets), rows, executor, item_timeout_s)

    async def one(c: Any, t: Any, f: Fields, pre: dict[str, Any] | None) -> ScoreResult:
        if pre is None:  # a TRL-style call over the batch did not answer in time
            return ScoreResult.failed(TIMEOUT, reason)
        async with gate:
            try:
                done = await asyncio.wait_for(_waiting_values(scorer, c, t, f, executor), item_timeout_s)
            except TimeoutError:
                return ScoreResult.failed(TIMEOUT, reason)
            return scorer.score(c, t, f, {**pre, **done})

    items = zip(completions, targets, rows, batch, strict=True)
    return list(await asyncio.gather(*(one(c, t, f, pre) for c, t, f, pre in items)))


async def _batch_values(
    scorer: Scorer,
    completions: list[Any],
    targets: list[Any],
    rows: list[Fields],
    executor: Executor | None,
    timeout_s: float,
) -> list[dict[str, Any] | None]:
    """Per item, the values of the TRL-style rewards (one call each over the batch, side by side);
    None for an item whose call passed `timeout_s`."""
    done: list[dict[str, Any] | None] = [{} for _ in completions]
    batched = scorer.users.batched
    index = scorer.rewarded(completions, targets) if batched else []
    if not index:
        return done
    cleaned = [scorer.clean(completions[i]) for i in index]
    picked = ([targets[i] for i in index], [rows[i] for i in index])

    extras_of: dict[str, dict[str, list[Any]]] = {}  # each call's log_extra columns, by reward

    async def call(user: UserReward) -> list[Any] | None:
        n = len(index)
        try:
            fn, kwargs, extras_of[user.name] = scorer.users.trl_call(user, cleaned, *picked)
            if user.is_async:
                raw = await asyncio.wait_for(fn(**kwargs), timeout_s)
            elif user.threads:
                work = asyncio.get_running_loop().run_in_executor(executor, functools.partial(fn, **kwargs))
                raw = await asyncio.wait_for(work, timeout_s)
            else:
                raw = fn(**kwargs)
        except TimeoutError:
            return None
        except UserRewardError as exc:
            return [UserRewardError(str(exc)) for _ in range(n)]
        except Exception as exc:
            why = f"user reward {user.name!r} raised {type(exc).__name__}: {exc}"
            return [UserRewardError(why) for _ in range(n)]
        return scorer.users.trl_checked(user, raw, n)

    for user, values in zip(batched, await asyncio.gather(*(call(u) for u in batched)), strict=True):
        for k, i in enumerate(index):
            row = done[i]
            if values is None:
                done[i] = None
            elif row is not None:
                row[user.name] = values[k]
        if values is not None:
            place_extras(done, index, extras_of.get(user.name, {}))
    return done


async def _waiting_values(
    scorer: Scorer, completion: Any, target: Any, fields: Fields, executor: Executor | None
) -> dict[str, Any]:
    """The values (or UserRewardErrors) of the item's async and threaded rewards, by name; empty
    when the item is not scored by its rewards at all (bad input, too long)."""
    if not isinstance(completion, str) or len(scorer.clean(completion)) > scorer.config.max_chars:
        return {}
    c = scorer.clean(completion)
    waiting = [u for u in scorer.user_rewards if u.concurrent and not u.batched]
    values = await asyncio.gather(*(_value(scorer, u, c, target, fields, executor) for u in waiting))
    return {u.name: v for u, v in zip(waiting, values, strict=True)}


async def _value(
    scorer: Scorer, user: UserReward, c: str, target: Any, fields: Fields, executor: Executor | None
) -> float | UserRewardError:
    try:
        args, kwargs = scorer.users.item_args(user, c, target, fields)
        fn = scorer.users.reward_callable(user)
        if user.is_async:
            raw = await fn(*args, **kwargs)
        else:
            call = functools.partial(fn, *args, **kwargs)
            raw = await asyncio.get_running_loop().run_in_executor(executor, call)
        return scorer.users.item_value(user, raw)
    except UserRewardError as exc:
        return exc
    except Exception as exc:
        return UserRewardError(f"user reward {user.name!r} raised {type(exc).__name__}: {exc}")
