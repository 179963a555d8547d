"""`python -m service.export RUN_DIR [--step N] [--merge] --out DIR`: a run's policy where other tools load it.

The checkpoint (the latest, or step N) is loaded into the run's own policy (its config.yaml) and
written with `save_pretrained`: safetensors weights, config.json, generation config and tokenizer
files, which `AutoModelForCausalLM.from_pretrained` / `AutoTokenizer.from_pretrained` load. With LoRA
the adapter alone, or with --merge the base model with the adapter merged in.

Every run with model.source=hf ends with `<run dir>/export/` made this way (with LoRA: the merged
model there and the adapter in `export/adapter/`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from service.config import (
    ConfigError,
    ServiceConfig,
    prompt_format,
    trainer_config,
    validate_config,
)
from service.config_sources import read_config_file
from service.run_files import CHECKPOINT_DIR, CONFIG_FILE

EXPORT_DIR = "export"
ADAPTER_DIR = "adapter"


def _checkpoint(cfg: ServiceConfig, run_dir: Path, step: int | None) -> Path:
    from trainer.checkpoint import list_checkpoints

    root = (
        Path(cfg.run.storage_path).expanduser().resolve() / str(cfg.run.name) / CHECKPOINT_DIR
        if cfg.run.storage_path
        else run_dir / CHECKPOINT_DIR
    )
    found = dict(list_checkpoints(root))
    if not found:
        raise ConfigError(f"RUN_DIR: {root} holds no checkpoint")
    if step is None:
        return found[max(found)]
    if step not in found:
        raise ConfigError(f"--step: {step} is not a checkpoint of this run; it has {sorted(found)}")
    return found[step]


def load_run_policy(run_dir: str | Path, step: int | None = None):
    """(the run's config, its policy with the weights of checkpoint `step` or the latest)."""
    from trainer.checkpoint import load_checkpoint
    from trainer.policy import build_policy

    run_dir = Path(run_dir).expanduser().resolve()
    if not (run_dir / CONFIG_FILE).is_file():
        raise ConfigError(f"RUN_DIR: {str(run_dir)!r} holds no {CONFIG_FILE}; it is not a run directory")
    cfg = validate_config(read_config_file(run_dir / CONFIG_FILE))
    if cfg.model.source != "hf":
        raise ConfigError(
            "RUN_DIR: the run's model.source is builtin; its checkpoints hold its weights already"
        )
    state, _ = load_checkpoint(_checkpoint(cfg, run_dir, step))
    policy = build_policy(trainer_config(cfg), prompt_format=prompt_format(cfg))
    policy.module.load_state_dict(state["model"])
    return cfg, policy


def export_run(run_dir: str | Path, out: str | Path, step: int | None = None, merge: bool = False) -> Path:
    _, policy = load_run_policy(run_dir, step)
    return policy.export(out, merge=merge)


def export_finished_run(run_dir: str | Path) -> Path:
    """`<run dir>/export/`: the model every hf run leaves (merged, adapter beside it, with LoRA)."""
    _, policy = load_run_policy(run_dir)
    out = Path(run_dir) / EXPORT_DIR
    policy.export(out, merge=True)
    if policy.is_lora:
        policy.export(out / ADAPTER_DIR)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.export", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--step", type=int, help="the checkpoint's step (default: the latest)")
    parser.add_argument(
        "--merge", action="store_true", help="LoRA: the base model with the adapter merged in"
    )
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args(argv)
    try:
        path = export_run(args.run_dir, args.out, args.step, args.merge)
    except ConfigError as exc:
        print(f"export error: {exc}", file=sys.stderr)
        return 2
    print(f"exported {args.run_dir} to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
