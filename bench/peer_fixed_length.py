"""Run the TRL peer benchmark with every completion generated to its full length (equal work).

    <peer python> bench/peer_fixed_length.py PEER_SCRIPT [its arguments]

The peer script is run unchanged; before it starts, TRL's `GRPOConfig` is given
`generation_kwargs={"min_new_tokens": max_completion_length}`, so `generate` masks EOS until the
last position, as this service's benchmark trials do with `fixed_length` (EOS ignored up to
`max_new_tokens`). Standard library and TRL only: it runs in the peer's virtual environment.
"""

from __future__ import annotations

import os
import runpy
import sys


def fix_lengths() -> None:
    from trl import GRPOConfig

    post_init = GRPOConfig.__post_init__

    def fixed(self: GRPOConfig) -> None:
        post_init(self)
        self.generation_kwargs = {
            **(self.generation_kwargs or {}),
            "min_new_tokens": self.max_completion_length,
        }

    GRPOConfig.__post_init__ = fixed


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    fix_lengths()
    script, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_path(script, run_name="__main__")
