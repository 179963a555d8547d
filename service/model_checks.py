"""Before an hf run starts: make its tiny model when asked for one, and refuse what cannot work.

Each refusal is one line naming the key (a ConfigError, exit 2): a model.path with no model in it,
a model that needs its own code while model.trust_remote_code is false, task.chat_template with a
tokenizer that has none, model.lora without peft, a prompt that with sampling.max_new_tokens does
not fit the model's positions, a prompt or target the tokenizer encodes with its unknown token or
cannot decode back (unless model.unknown_tokens=allow; `service.preflight.tokens`). Only configs
and tokenizers are loaded here, never the weights.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from service.config import ConfigError, ServiceConfig, prompt_format
from service.preflight.tokens import RunRow, check_unknown_tokens
from service.run_dir import TINY_MODEL_DIR

TRAIN_PROMPTS_CHECKED = 512  # a generated stream is endless: its first prompts stand for the rest


def prepare_model(cfg: ServiceConfig, log: Callable[[str], None]) -> None:
    """Write the tiny model of an hf run without model.path (resolved to <run dir>/tiny_model)."""
    if cfg.model.source != "hf":
        return
    path = Path(str(cfg.model.path))
    if path.name != TINY_MODEL_DIR or path.parent != Path(str(cfg.run.run_dir)):
        return
    if (path / "config.json").is_file():  # a resumed run keeps its model
        return
    from trainer.policy.hf_tiny import write_tiny_model

    write_tiny_model(path, "llama", seed=cfg.seed)
    log(f"[model] a tiny random llama model (2 layers, 128 wide, character tokenizer) made in {path}")


def check_hf_model(cfg: ServiceConfig, rows: Sequence[RunRow]) -> None:
    """ConfigError (one line) for the first thing an hf run cannot use with the rows it will use
    (`run_rows`); nothing for a builtin run."""
    m = cfg.model
    if m.source != "hf":
        return
    for module, extra, key in (("transformers", "hf", "model.source=hf"), ("peft", "lora", "model.lora")):
        if module == "transformers" or m.lora is not None:
            try:
                importlib.import_module(module)
            except ImportError:
                raise ConfigError(
                    f"{key} needs {module}, which is not installed: pip install -e '.[{extra}]'"
                ) from None
    _check_path(m.path, m.trust_remote_code)
    try:
        from trainer.policy.hf import load_tokenizer
        from trainer.policy.hf_tokenizer import HFTokenizer

        tokenizer = HFTokenizer(load_tokenizer(m), prompt_format(cfg))
        config = _auto_config(m)
    except ValueError as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None
    except OSError as exc:
        raise ConfigError(f"model.path: {m.path!r} cannot be loaded ({_first_line(exc)})") from None
    _check_positions(cfg, tokenizer, config, [r.prompt for r in rows if _fit_checked(r)])
    check_unknown_tokens(tokenizer.tok, rows, m.unknown_tokens)


def _check_path(path: str | None, trust_remote_code: bool) -> None:
    local = Path(str(path)).expanduser()
    if local.exists() or str(path).startswith((".", "/", "~")):
        if not (local / "config.json").is_file():
            raise ConfigError(f"model.path: {str(path)!r} holds no model (no config.json there)")
        config = json.loads((local / "config.json").read_text())
        if config.get("auto_map") and not trust_remote_code:
            from transformers import CONFIG_MAPPING

            if config.get("model_type") not in CONFIG_MAPPING:
                raise ConfigError(
                    f"model.path: {str(path)!r} needs the model's own Python code (auto_map); set "
                    "model.trust_remote_code=true if you trust it"
                )


def _auto_config(m) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(m.path, revision=m.revision, trust_remote_code=m.trust_remote_code)
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise ValueError(
                f"model.path: {m.path!r} needs the model's own Python code; set model.trust_remote_code=true "
                "if you trust it"
            ) from None
        raise


def _check_positions(cfg: ServiceConfig, tokenizer, config: Any, prompts: Sequence[str]) -> None:
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if not limit or not prompts:
        return
    longest, worst = max((len(tokenizer.encode_prompt(p)), p) for p in prompts)
    if longest + cfg.sampling.max_new_tokens > limit:
        preview = worst if len(worst) <= 40 else worst[:37] + "..."
        raise ConfigError(
            f"sampling.max_new_tokens: {cfg.sampling.max_new_tokens} + the longest prompt ({longest} tokens, "
            f"{preview!r}) exceeds the model's {limit} positions"
        )


def run_rows(task, eval_pairs: Sequence[Any], train_pairs: Sequence[Any] | None) -> list[RunRow]:
    """The rows a run will give the model: the held-out ones, and every row of a training file or the
    first TRAIN_PROMPTS_CHECKED of a generated stream."""
    held = [RunRow("held-out", i, p.prompt, p.target) for i, p in enumerate(eval_pairs)]
    if train_pairs is not None:
        return held + [RunRow("training", i, p.prompt, p.target) for i, p in enumerate(train_pairs)]
    pairs = task.generated_head(TRAIN_PROMPTS_CHECKED)
    return held + [RunRow("training", i, p.prompt, p.target) for i, p in enumerate(pairs)]


def _fit_checked(row: RunRow) -> bool:
    """Whether a row's prompt is measured against the model's positions (tokenizing every prompt
    through a chat template is slow; the first training rows stand for the rest)."""
    return row.split != "training" or row.index < TRAIN_PROMPTS_CHECKED


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
