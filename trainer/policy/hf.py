"""A `transformers` causal LM as a policy (model.source=hf): its own tokenizer, KV cache and export.

The model is loaded in float32 (master weights; bf16 is the trainer's autocast) and wrapped in
`HFCausalLM`, whose forward is the policy forward `(ids, position_ids, attn_mask) -> logits`, so the
log-prob pass, SFT, DDP and checkpoints treat it as they treat the built-in GPT. Left padding needs
explicit positions (they count real tokens), which every forward here passes, as `generate` does.
Decoding prefills each prompt once into the model's own cache (`DynamicCache`), repeats it for
the K completions (`batch_repeat_interleave`), moves its layers into buffers of the final length
(`hf_cache.preallocate`) and feeds one token per step.

With `model.lora` the model is wrapped by peft: only the adapter's parameters require gradients
(so only they reach the optimiser), and the KL reference is the same module with the adapter
switched off (`disable_adapter`), not a copy.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import Tensor, nn
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from trainer.config import SamplingConfig
from trainer.model_config import HFModelConfig
from trainer.policy.attention import positions_from_mask
from trainer.policy.base import PromptFormat, Reference, Step, frozen_copy
from trainer.policy.gpt_decoding import full_decoder
from trainer.policy.hf_cache import cache_kwarg, output_cache, preallocate
from trainer.policy.hf_gelu import replace_gelu_new
from trainer.policy.hf_shared_prefix import shared_prefix_logits
from trainer.policy.hf_tokenizer import HFTokenizer
from trainer.policy.shared_prefix import dropout_active, shared_inputs

PAD_TOKEN = "<|pad|>"  # added to a tokenizer that has none (never EOS reused as PAD)


def step_mask(seen: Tensor, attn_implementation: str, dtype: torch.dtype) -> Tensor:
    """The mask of every decode step, made once: `[N, T_max]` 0/1 (`seen`) as the 4D mask the
    model's attention takes where we know its form, sliced to the step's keys each step.

    A decode step's one query may attend to every real key before it, so its causal mask is the
    padding mask. Given a 2D mask, transformers builds the 4D one in every forward (a few dozen
    small ops per decode step); a 4D mask it uses as it is. SDPA takes booleans (True: attend),
    eager attention an additive float mask; other implementations (flash attention's own padding
    handling) keep the 2D mask."""
    if attn_implementation == "sdpa":
        return seen.bool()[:, None, None, :]
    if attn_implementation == "eager":
        blocked = torch.zeros(seen.shape, dtype=dtype, device=seen.device)
        return blocked.masked_fill_(seen == 0, torch.finfo(dtype).min)[:, None, None, :]
    return seen


class HFCausalLM(nn.Module):
    """The policy forward over a `transformers` model: logits `[B, T, V]`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        ids: Tensor,
        position_ids: Tensor | None = None,
        attn_mask: Tensor | None = None,
        logits_to_keep: int = 0,
        shared_prefix: tuple[int, int] | None = None,
    ) -> Tensor:
        """shared_prefix (K, P): rows in groups of K sharing their first P columns, each group's
        prompt run once (`trainer.policy.hf_shared_prefix`); not while dropout is active or with
        gradient checkpointing in training (transformers then turns the cache off)."""
        if attn_mask is not None and position_ids is None:
            position_ids = positions_from_mask(attn_mask)
        if shared_prefix is not None and self._can_share():
            mask, positions, keep = shared_inputs(ids, position_ids, attn_mask, logits_to_keep)
            return shared_prefix_logits(self.model, ids, positions, mask, *shared_prefix, keep)
        mask = None if attn_mask is None else attn_mask.long()
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=position_ids,
            use_cache=False,
            logits_to_keep=logits_to_keep,
        )
        return out.logits

    def _can_share(self) -> bool:
        return not dropout_active(self) and not (self.training and _checkpointing(self.model))


def _checkpointing(model: nn.Module) -> bool:
    """Whether a transformers model (under peft's wrapper or not) recomputes activations."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # newer name first
        if hasattr(type(base), name):
            return bool(getattr(base, name))
    return False


def load_kwargs(cfg: HFModelConfig) -> dict:
    return {"revision": cfg.revision, "trust_remote_code": cfg.trust_remote_code}


def load_tokenizer(cfg: HFModelConfig):
    """The model's tokenizer, with a PAD token added when it has none."""
    tok = AutoTokenizer.from_pretrained(cfg.path, **load_kwargs(cfg))
    if tok.pad_token_id is None:
        tok.add_special_tokens({"pad_token": PAD_TOKEN})
    return tok


def loaded_attention(cfg: HFModelConfig) -> str:
    """The attention a model is loaded with: `auto` is made concrete once the run's precision is
    known (`HFPolicy.set_attention`), and loads as sdpa until then."""
    return "sdpa" if cfg.attn_implementation == "auto" else cfg.attn_implementation


def load_model(cfg: HFModelConfig, vocab: int, seed: int = 0) -> nn.Module:
    """The transformers model of cfg.path in float32 (a PAD row added to a `vocab` wide embedding),
    with new LoRA adapters drawn from `seed`: every rank, and every run of the config, starts alike."""
    hf_logging.disable_progress_bar()  # a bar per load and save would flood job logs
    model = AutoModelForCausalLM.from_pretrained(
        cfg.path, dtype=torch.float32, attn_implementation=loaded_attention(cfg), **load_kwargs(cfg)
    )
    if model.get_input_embeddings().weight.shape[0] < vocab:  # a PAD token was added
        model.resize_token_embeddings(vocab)
    replace_gelu_new(model)  # the same values with fewer temporaries (GPT-2 and its kin)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if cfg.lora is not None:
        with torch.random.fork_rng(devices=[]):  # the adapters' initial draw, apart from the global RNG
            torch.manual_seed(seed)
            model = _with_lora(model, cfg)
    return model


def _with_lora(model: nn.Module, cfg: HFModelConfig) -> nn.Module:
    try:
        from peft import LoraConfig, PeftModel, get_peft_model
    except ImportError:
        raise ImportError("model.lora needs peft: pip install -e '.[lora]'") from None
    if cfg.adapter_path:
        return PeftModel.from_pretrained(model, cfg.adapter_path, is_trainable=True)
    lora = cfg.lora
    config = LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
        target_modules=lora.target_modules, task_type="CAUSAL_LM",
    )  # fmt: skip
    return get_peft_model(model, config)


def _sync_special_ids(model: nn.Module, tok) -> None:
    """The model's and its generation config's BOS/EOS/PAD ids are the tokenizer's."""
    for config in (model.config, getattr(model, "generation_config", None)):
        if config is None:
            continue
        config.pad_token_id, config.eos_token_id = tok.pad_token_id, tok.eos_token_id
        if tok.bos_token_id is not None:
            config.bos_token_id = tok.bos_token_id


class HFPolicy:
    """A `transformers` causal LM and its tokenizer behind the `Policy` interface."""

    positions_key = "the model's max_position_embeddings"

    def __init__(self, model: nn.Module, tokenizer: HFTokenizer, cfg: HFModelConfig) -> None:
        self.module = HFCausalLM(model)
        self.tokenizer, self.cfg = tokenizer, cfg
        _sync_special_ids(self.base_model, tokenizer.tok)

    @classmethod
    def load(cls, cfg: HFModelConfig, fmt: PromptFormat | None = None, seed: int = 0) -> HFPolicy:
        """seed: new LoRA adapters' initial weights (`load_model`)."""
        tok = load_tokenizer(cfg)
        tokenizer = HFTokenizer(tok, fmt)
        return cls(load_model(cfg, len(tok), seed), tokenizer, cfg)

    @property
    def model(self) -> nn.Module:
        """The transformers model (a peft model with LoRA)."""
        return self.module.model

    @property
    def base_model(self) -> nn.Module:
        """The transformers model without any peft wrapper."""
        model = self.model
        return model.get_base_model() if self.is_lora else model

    @property
    def is_lora(self) -> bool:
        return hasattr(self.model, "peft_config")

    @property
    def shared_prefix(self) -> bool:
        return self.cfg.shared_prefix

    @property
    def vocab_size(self) -> int:
        return int(self.base_model.get_output_embeddings().weight.shape[0])

    @property
    def width(self) -> int:
        return int(self.base_model.config.hidden_size)

    @property
    def max_positions(self) -> int:
        config = self.base_model.config
        n = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        return int(n) if n else 1 << 30

    def set_attention(self, implementation: str) -> None:
        """Switch the loaded model's attention (transformers' `set_attn_implementation`)."""
        if self.base_model.config._attn_implementation != implementation:
            self.base_model.set_attn_implementation(implementation)

    def decoder(self, ids: Tensor, mask: Tensor, cfg: SamplingConfig, max_len: int) -> tuple[Tensor, Step]:
        if not cfg.use_kv_cache:
            return full_decoder(self.module, ids, mask, cfg, max_len)
        k, (b, p) = cfg.group_size, ids.shape
        model = self.model
        out = model(
            input_ids=ids, attention_mask=mask.long(), position_ids=positions_from_mask(mask), use_cache=True
        )
        cache = output_cache(out)
        cache_arg = cache_kwarg(self.base_model)
        cache.batch_repeat_interleave(k)  # one prefill per prompt serves its K rows
        preallocate(cache, max_len)  # each step writes its column instead of copying the cache
        seen = torch.ones((b * k, max_len), dtype=torch.long, device=ids.device)  # [N, T_max]
        seen[:, :p] = mask.repeat_interleave(k, dim=0)
        seen = step_mask(seen, model.config._attn_implementation, model.dtype)
        next_pos = mask.sum(1).repeat_interleave(k)  # [N] position of the first completion token

        def step(tokens: Tensor, t: int) -> Tensor:
            logits = model(
                input_ids=tokens.unsqueeze(1), attention_mask=seen[..., : p + t + 1],
                position_ids=next_pos.unsqueeze(1), use_cache=True, **{cache_arg: cache},
            ).logits[:, -1]  # fmt: skip
            next_pos.add_(1)
            return logits

        return out.logits[:, -1].repeat_interleave(k, dim=0), step

    def reference(self, on_cpu: bool) -> Reference:
        if self.is_lora and self.cfg.reference == "base":
            return Reference(self.module, context=self.model.disable_adapter, is_copy=False)
        return frozen_copy(self.module, on_cpu)  # a full model, or the starting adapter kept frozen

    def export(self, out_dir: str | Path, merge: bool = False) -> Path:
        """`save_pretrained` of the model (safetensors, config.json, generation config) and tokenizer.

        With LoRA: the adapter alone, or with `merge` the base model with the adapter merged in.
        """
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        model = self.model
        if self.is_lora and merge:
            model = copy.deepcopy(model).merge_and_unload()
        model.save_pretrained(out, safe_serialization=True)
        self.tokenizer.tok.save_pretrained(out)
        return out
