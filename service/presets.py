"""Named starting points for a run; `--config` files and `--set` overrides go on top.

- `smoke`: the whole pipeline (embedded Ray, SFT, GRPO with the reward pool, evaluation,
  checkpoints, records, report) in well under a minute on 2 CPUs. It checks plumbing, not learning.
- `demo` (the default): a small policy on 2 CPUs in under 10 minutes; GRPO raises the held-out
  reward over its SFT start.
- `gpt2-4090`: GPT-2 small's shape (12 layers, 768 wide; 85M parameters with the character
  vocabulary, GPT-2's 124M counting a 50k-token embedding) in bf16, one DDP rank per GPU, a
  reward pool sized for CPU nodes.
- `move-smoke` / `move-demo`: the same two for the engine-scored `move` task (needs Stockfish);
  move-demo's GRPO raises the held-out legal rate and lowers the mean centipawn loss over its SFT start.
- `hf-smoke` / `hf-demo`: the same two on a tiny `transformers` Llama-architecture model made in
  the run directory (model.source=hf): the whole HF pipeline ending with `export/`, and SFT then
  GRPO on the FEN task.

A preset holds only what differs from the defaults of the typed configs.
"""

from __future__ import annotations

from typing import Any

DEFAULT_PRESET = "demo"

_SMOKE: dict[str, Any] = {
    "model": {"size": "custom", "n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 128},
    "data": {"min_plies": 1, "max_plies": 2, "eval_size": 16},
    "sampling": {"group_size": 4, "max_new_tokens": 72, "prompts_per_microbatch": 4},
    "sft": {"steps": 6, "batch_size": 16, "lr": 3e-3, "warmup_steps": 0},
    "grpo": {"steps": 4, "prompts_per_step": 4, "eval_every": 2},
    "checkpoint": {"every_steps": 4, "keep_last": 2},
    "pool": {"num_workers": 1, "cpus_per_worker": 0.5, "min_chunk_size": 8},
    "scaling": {"num_workers": 1, "cpus_per_worker": 1.0},
    "run": {"eval_samples": 2},
}

_DEMO: dict[str, Any] = {
    "model": {"size": "tiny", "block_size": 128},
    "data": {"min_plies": 1, "max_plies": 4, "eval_size": 128},
    "sampling": {"group_size": 8, "max_new_tokens": 72, "temperature": 1.0, "prompts_per_microbatch": 8},
    "sft": {"steps": 300, "batch_size": 64, "lr": 2e-3, "warmup_steps": 20},
    "grpo": {"steps": 80, "prompts_per_step": 16, "eval_every": 20, "beta": 0.04},
    "optim": {"lr": 1e-4},
    "checkpoint": {"every_steps": 50, "keep_last": 2},
    "pool": {"num_workers": 2, "cpus_per_worker": 0.5, "min_chunk_size": 32},
    "scaling": {"num_workers": 1, "cpus_per_worker": 1.0},
    "run": {"dashboard": True},
}

_GPT2_4090: dict[str, Any] = {
    "model": {"size": "gpt2", "block_size": 256},
    "data": {"min_plies": 1, "max_plies": 16, "natural": True, "eval_size": 256},
    "sampling": {"group_size": 8, "max_new_tokens": 96, "prompts_per_microbatch": 16},
    "sft": {"steps": 3000, "batch_size": 128, "lr": 3e-4, "warmup_steps": 100},
    "grpo": {"steps": 1000, "prompts_per_step": 64, "eval_every": 50},
    "optim": {"lr": 1e-5, "weight_decay": 0.0, "warmup_steps": 10},
    "precision": {"dtype": "bf16"},
    "checkpoint": {"every_steps": 100, "keep_last": 3},
    "pool": {"num_workers": 16, "cpus_per_worker": 1.0},
    "scaling": {"num_workers": 2, "use_gpu": True, "cpus_per_worker": 4.0, "gpus_per_worker": 1.0},
}

# The engine-scored move task: a FEN in, a SAN move out (a few characters), judged by Stockfish.
_MOVE_SMOKE: dict[str, Any] = {
    **_SMOKE,
    "task": {"name": "move", "train_positions": 48, "engine": {"nodes": 500}},
    # An engine search costs milliseconds: a chunk gets longer than the FEN reward's 10 s on a busy machine.
    "pool": {**_SMOKE["pool"], "chunk_timeout_s": 60.0},
    "sampling": {"group_size": 4, "max_new_tokens": 8, "prompts_per_microbatch": 4},
}

_MOVE_DEMO: dict[str, Any] = {
    **_DEMO,
    "task": {"name": "move", "train_positions": 2000},
    "pool": {**_DEMO["pool"], "chunk_timeout_s": 60.0},
    "data": {"min_plies": 1, "max_plies": 6, "eval_size": 128},
    "sampling": {"group_size": 8, "max_new_tokens": 8, "temperature": 1.0, "prompts_per_microbatch": 8},
}

# model.source=hf without model.path: a tiny random Llama-architecture model (2 layers, 128 wide, a
# character tokenizer) is made in the run directory (`service.tiny_model`); --set model.path=DIR
# trains any other local transformers model instead.
_HF_SMOKE: dict[str, Any] = {**_SMOKE, "model": {"source": "hf"}}

_HF_DEMO: dict[str, Any] = {
    **_DEMO,
    "model": {"source": "hf"},
    "sft": {"steps": 300, "batch_size": 64, "lr": 2e-3, "warmup_steps": 20},
    "grpo": {"steps": 60, "prompts_per_step": 16, "eval_every": 20, "beta": 0.04},
    "run": {"dashboard": False},
}

PRESETS: dict[str, dict[str, Any]] = {
    "smoke": _SMOKE,
    "demo": _DEMO,
    "gpt2-4090": _GPT2_4090,
    "move-smoke": _MOVE_SMOKE,
    "move-demo": _MOVE_DEMO,
    "hf-smoke": _HF_SMOKE,
    "hf-demo": _HF_DEMO,
}
