"""The sync iterator over an async log tail (no cluster: a fake async generator)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from service.client._follow import follow


def test_chunks_arrive_in_order_and_the_iterator_ends_with_the_tail():
    async def tail():
        for index in range(5):
            await asyncio.sleep(0.001)
            yield f"line {index}\n"

    assert list(follow(tail)) == [f"line {index}\n" for index in range(5)]


def test_an_error_in_the_tail_is_raised_in_the_caller_after_earlier_chunks():
    async def tail():
        yield "first\n"
        raise RuntimeError("websocket closed unexpectedly")

    seen = []
    with pytest.raises(RuntimeError, match="closed unexpectedly"):
        for chunk in follow(tail):
            seen.append(chunk)
    assert seen == ["first\n"]


def test_leaving_early_cancels_the_tail_and_its_thread_ends():
    cancelled = threading.Event()

    async def endless():
        try:
            while True:
                yield "tick\n"
                await asyncio.sleep(0.01)
        finally:
            cancelled.set()

    chunks = follow(endless)
    assert next(chunks) == "tick\n"
    chunks.close()
    assert cancelled.wait(5)
    assert not any(thread.name == "log-tail" for thread in threading.enumerate())


def test_works_while_the_calling_thread_runs_an_event_loop():
    async def tail():
        yield "a"
        yield "b"

    async def caller():  # e.g. a notebook cell: a loop is already running here
        return list(follow(tail))

    assert asyncio.run(caller()) == ["a", "b"]
