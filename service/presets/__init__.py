"""Named starting points for a run, one YAML file each in this folder; `--config` files and `--set`
overrides go on top.

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
- `code-smoke` / `code-demo`: the same two for the `code` task's bundled problems (a one-line lambda
  run against assert lines in the sandbox, which they need); code-demo's GRPO aims to raise the
  held-out pass@1 over its SFT start.
- `env-smoke` / `env-demo`: the same two for multi-turn episodes with the bundled `guess`
  environment (find a number; it answers "higher" or "lower"); env-demo's GRPO aims to raise the
  held-out success rate over its SFT start.

A preset holds only what differs from the defaults of the typed configs, and is the same kind of
YAML as a user's `--config` file (`python -m service.train --config service/presets/demo.yaml`
runs what `--preset demo` runs). The files ship with the package (package data).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

DEFAULT_PRESET = "demo"
# The order presets are listed in (`--help`, errors); every YAML file of this folder is one.
PRESET_NAMES = (
    "smoke", "demo", "gpt2-4090", "move-smoke", "move-demo", "hf-smoke", "hf-demo", "code-smoke", "code-demo",
    "env-smoke", "env-demo",
)  # fmt: skip


def preset_path(name: str) -> Path:
    """The YAML file of a preset (it may be given to `--config` as it is)."""
    return Path(str(resources.files(__name__).joinpath(f"{name}.yaml")))


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load(preset_path(name).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"preset {name}: {preset_path(name)} holds no mapping of sections")
    return data


PRESETS: dict[str, dict[str, Any]] = {name: _load(name) for name in PRESET_NAMES}
