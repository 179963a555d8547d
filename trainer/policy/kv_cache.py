"""Preallocated key/value cache for incremental decoding.

All rows of a batch share one write position: prompts are left-padded, so after the prefill every
row's next token goes to the same column; the `key_valid` mask keeps left pads out of attention.
A `static` cache keeps every shape fixed while decoding (what torch.compile and CUDA graphs need):
each step attends over all `max_len` columns, the unwritten ones masked. An eager cache counts the
written columns on the host and attends over those only: reading keys and values is what a decode
step's attention costs, and on average half the columns are not written yet.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Keys and values of every layer, `[N, H, T_max, D]` per layer, written at a shared position.

    `pos` is a 0-dim long tensor (not a Python int) so a compiled decode step can read and advance
    it without a host sync or a recompilation. `key_valid[n, t]` is True where column t of row n
    holds a real token (False for left pads and for columns not written yet).
    """

    def __init__(
        self,
        n_layer: int,
        batch: int,
        n_head: int,
        max_len: int,
        head_dim: int,
        *,
        device: torch.device | str,
        dtype: torch.dtype,
        static: bool = False,
    ) -> None:
        if min(n_layer, batch, n_head, max_len, head_dim) < 1:
            raise ValueError(
                f"KVCache sizes must be >= 1, got n_layer={n_layer} batch={batch} n_head={n_head} "
                f"max_len={max_len} head_dim={head_dim}"
            )
        shape = (batch, n_head, max_len, head_dim)
        # an eager cache reads written columns only; a static one reads every column, masked,
        # and a masked NaN of an unwritten one would still reach softmax's sum
        alloc = torch.zeros if static else torch.empty
        self.k = [alloc(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.v = [alloc(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.key_valid = torch.zeros(batch, max_len, device=device, dtype=torch.bool)  # [N, T_max]
        self.key_index = torch.arange(max_len, device=device)  # [T_max] column numbers
        self.pos = torch.zeros((), device=device, dtype=torch.long)  # next column to write
        self.batch, self.max_len, self.dtype = batch, max_len, dtype
        self.static = static
        self.length = 0  # columns written before this call, counted on the host (not kept by a static cache)

    @classmethod
    def for_model(
        cls,
        config,
        batch: int,
        max_len: int,
        *,
        device: torch.device | str,
        dtype: torch.dtype,
        static: bool = False,
    ) -> KVCache:
        """A cache shaped for a GPT built from `config` (a trainer.model_config.BuiltinModelConfig)."""
        return cls(
            config.n_layer,
            batch,
            config.n_head,
            max_len,
            config.n_embd // config.n_head,
            device=device,
            dtype=dtype,
            static=static,
        )

    def tensors(self) -> list[Tensor]:
        """Every buffer of the cache (to mark as static addresses for CUDA graphs)."""
        return [*self.k, *self.v, self.key_valid, self.key_index, self.pos]

    def reset(self) -> None:
        """Forget all content (buffers are reused; stale keys stay masked out by `key_valid`)."""
        self.key_valid.zero_()
        self.pos.zero_()
        self.length = 0

    def open(self, t: int, attn_mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Start a call that writes `t` columns (`attn_mask` `[N, t]`: which are real tokens; None:
        all). Returns the columns it writes `[t]`, and `key_valid` and the column numbers of the
        keys it attends over (`[N, Tk]`, `[Tk]`: every column if static, else those written)."""
        if self.static:
            cols = self.key_index[:t] + self.pos
            if attn_mask is None:
                self.key_valid.index_fill_(1, cols, True)
            else:
                self.key_valid.index_copy_(1, cols, attn_mask.bool())
            return cols, self.key_valid, self.key_index
        start, end = self.length, self.length + t
        if end > self.max_len:
            raise ValueError(f"writing {t} columns after {start} overflows the cache's {self.max_len}")
        self.key_valid[:, start:end] = True if attn_mask is None else attn_mask.bool()
        return self.key_index[start:end], self.key_valid[:, :end], self.key_index[:end]

    def write(self, layer: int, cols: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store `k`, `v` `[N, H, T, D]` at columns `cols` `[T]` (from `open`); return the layer's
        keys and values to attend over (`[N, H, Tk, D]`, as `open` said)."""
        kbuf, vbuf = self.k[layer], self.v[layer]
        if self.static:
            kbuf.index_copy_(2, cols, k.to(kbuf.dtype))
            vbuf.index_copy_(2, cols, v.to(vbuf.dtype))
            return kbuf, vbuf
        start = self.length  # `advance` moves it only after every layer has written
        end = start + k.shape[2]
        kbuf[:, :, start:end] = k
        vbuf[:, :, start:end] = v
        return kbuf[:, :, :end], vbuf[:, :, :end]

    def advance(self, t: int) -> None:
        """The call's `t` columns are written: the next call writes after them."""
        self.pos.add_(t)
        if not self.static:  # a static cache's step compiles once: no Python value may change
            self.length += t

    def load_repeated(self, prefix: KVCache, repeats: int) -> None:
        """Fill this cache's first columns with `prefix`, each of its rows repeated `repeats` times.

        This is how one prefill per prompt serves its K completions: prefix has B rows, this cache
        B*K rows laid out group after group (row b*K + j is copy j of prompt b).
        """
        b, p = prefix.batch, prefix.max_len
        if b * repeats != self.batch or p > self.max_len or len(prefix.k) != len(self.k):
            raise ValueError(
                f"cannot load a cache of {b} rows x {p} columns repeated {repeats} times into one of "
                f"{self.batch} rows x {self.max_len} columns"
            )
        for dst, src in zip(self.k + self.v, prefix.k + prefix.v, strict=True):
            dst[:, :, :p].unflatten(0, (b, repeats)).copy_(src.unsqueeze(1))
        self.key_valid.zero_()
        self.key_valid[:, :p].unflatten(0, (b, repeats)).copy_(prefix.key_valid.unsqueeze(1))
        self.pos.copy_(prefix.pos)
        self.length = prefix.length
