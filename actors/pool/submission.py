"""What a submission sends: its items checked, and each chunk's payload by value or by reference."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import ray

_INLINE_PAYLOAD_BYTES = 96 * 1024


def check_items(completions: Any, targets: Any, group_ids: Any) -> int:
    for name, seq in (("completions", completions), ("targets", targets)):
        if isinstance(seq, str | bytes) or not isinstance(seq, Sequence):
            raise TypeError(f"{name} must be a list or tuple of items, got {type(seq).__name__}")
    if len(completions) != len(targets):
        raise ValueError(
            f"got {len(completions)} completions and {len(targets)} targets: need one target each"
        )
    if group_ids is not None and len(group_ids) != len(completions):
        raise ValueError(f"got {len(group_ids)} group_ids for {len(completions)} completions: need one each")
    return len(completions)


def chunk_payload(
    completions: Sequence[Any], targets: Sequence[Any], fields: Sequence[Any] | None, start: int
) -> Any:
    """A chunk's (completions, targets[, fields]): by value when small, else once into the object store.

    Ray copies a small argument into the call itself (no store round trip: ~1 ms saved per call);
    a large one it would put in the store on every call, so it is put once here and a retried or
    split chunk reuses it. Items without fields (the FEN task) travel as a pair, as they always have.
    """
    payload = (
        (list(completions), list(targets))
        if fields is None
        else (list(completions), list(targets), list(fields))
    )
    # Only plain payloads go inline: all-str items, or fields (data read from JSON) that have been
    # pickled once here. Anything else might not pickle, and that must fail here, in submit, not
    # later in the dispatcher thread (which would take the whole pool down).
    if fields is None:
        approx_bytes = sum(len(x) + 16 if isinstance(x, str) else 64 for part in payload for x in part)
        if approx_bytes < _INLINE_PAYLOAD_BYTES and all(isinstance(x, str) for part in payload for x in part):
            return payload
    elif _pickles_small(payload):
        return payload
    try:
        return ray.put(payload)
    except Exception as exc:
        stop = start + len(completions)
        raise TypeError(
            f"items [{start}:{stop}] cannot be sent to the reward workers: {type(exc).__name__}: {exc}"
        ) from exc


def _pickles_small(payload: Any) -> bool:
    """True when `payload` pickles (plain data: JSONL fields, None targets) within the inline limit."""
    try:
        return len(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)) < _INLINE_PAYLOAD_BYTES
    except Exception:  # let ray.put, with its own serializer, have the last word
        return False
