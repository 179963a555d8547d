"""A `transformers` cache layer that grows into a buffer allocated once, instead of concatenating.

`DynamicLayer` appends each decode step's keys and values with `torch.cat`, copying the whole
cache every step (about a fifth of a decode step on CPU for the benchmark's 2-layer GPT-2).
Sampling knows its final length up front (prompt + max_new_tokens), so each layer's buffer is
allocated once and a step writes only its own column. `keys` / `values` stay views of the written
part, so whatever reads them (attention, the mask's sizes, `get_seq_length`) sees exactly what a
`DynamicLayer` would hold.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """A `DynamicLayer` whose keys/values are views into `[N, H, max_len, D]` buffers."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, max_len: int) -> None:
        super().__init__()
        n, h, t, _ = keys.shape
        if t > max_len:
            raise ValueError(f"a cache of {t} columns does not fit in {max_len}")
        self._kbuf = keys.new_empty((n, h, max_len, keys.shape[-1]))
        self._vbuf = values.new_empty((n, h, max_len, values.shape[-1]))
        self._kbuf[:, :, :t] = keys
        self._vbuf[:, :, :t] = values
        self.keys, self.values = self._kbuf[:, :, :t], self._vbuf[:, :, :t]
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        start = self.keys.shape[-2]
        end = start + key_states.shape[-2]
        if end > self._kbuf.shape[-2]:
            raise ValueError(
                f"writing {key_states.shape[-2]} columns after {start} overflows {self._kbuf.shape[-2]}"
            )
        self._kbuf[:, :, start:end] = key_states
        self._vbuf[:, :, start:end] = value_states
        self.keys, self.values = self._kbuf[:, :, :end], self._vbuf[:, :, :end]
        return self.keys, self.values


def preallocate(cache: Any, max_len: int) -> int:
    """Turn each plain `DynamicLayer` of `cache` (after its prefill) into a `PreallocatedLayer` of
    `max_len` columns; other kinds (sliding windows, linear attention) are left as they are.
    Returns how many layers were turned."""
    turned = 0
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer and layer.is_initialized:
            cache.layers[i] = PreallocatedLayer(layer.keys, layer.values, max_len)
            turned += 1
    return turned


def cache_kwarg(model: torch.nn.Module) -> str:
    """The forward argument that takes a cache: `cache` where the model has it (newer transformers,
    where `past_key_values` is deprecated and warns on every run), else `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def output_cache(out: Any) -> Any:
    """The cache a forward returned, under either name."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values
