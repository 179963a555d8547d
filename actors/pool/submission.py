"""What a call sends: its items checked, and each chunk's payload by value or by reference."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import ray

_INLINE_PAYLOAD_BYTES = 96 * 1024  # just below Ray's inline limit for call arguments (100 KiB)


def check_columns(columns: Sequence[tuple[str, Any]], group_ids: Any = None) -> int:
    """The number of items of named columns (name, sequence), one entry per item each; TypeError or
    ValueError (one line naming the column) otherwise."""
    n: int | None = None
    first = ""
    for name, seq in columns:
        if isinstance(seq, str | bytes) or not isinstance(seq, Sequence):
            raise TypeError(f"{name} must be a list or tuple of items, got {type(seq).__name__}")
        if n is None:
            n, first = len(seq), name
        elif len(seq) != n:
            raise ValueError(f"got {n} {first} and {len(seq)} {name}: need one each")
    n = n or 0
    if group_ids is not None and len(group_ids) != n:
        raise ValueError(f"got {len(group_ids)} group_ids for {n} {first}: need one each")
    return n


def chunk_payload(columns: Sequence[Sequence[Any]], start: int) -> Any:
    """A chunk's columns: by value when small, else once into the object store.

    Ray copies a small argument into the call itself (no store round trip: ~1 ms saved per call);
    a large one it would put in the store on every call, so it is put once here and a retried or
    split chunk reuses it.
    """
    payload = tuple(list(column) for column in columns)
    # Only plain payloads go inline: all-str items, or others (data read from JSON, episode calls)
    # that have been pickled once here. Anything else might not pickle, and that must fail here,
    # in the caller, not later in the dispatcher thread (which would take the whole pool down).
    if all(isinstance(x, str) for column in payload for x in column):
        approx_bytes = sum(len(x) + 16 for column in payload for x in column)
        if approx_bytes < _INLINE_PAYLOAD_BYTES:
            return payload
    elif _pickles_small(payload):
        return payload
    try:
        return ray.put(payload)
    except Exception as exc:
        stop = start + (len(payload[0]) if payload else 0)
        raise TypeError(
            f"items [{start}:{stop}] cannot be sent to the pool's workers: {type(exc).__name__}: {exc}"
        ) from exc


def _pickles_small(payload: Any) -> bool:
    """True when `payload` pickles (plain data: JSONL fields, None targets) within the inline limit."""
    try:
        return len(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)) < _INLINE_PAYLOAD_BYTES
    except Exception:  # let ray.put, with its own serializer, have the last word
        return False
