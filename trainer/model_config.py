"""The policy's config, one variant per `model.source`: the built-in GPT or a transformers model."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from trainer.config_base import Frozen, tagged_union

# Named model sizes. `tiny` matches the reference GRPO benchmark shape (2 layers, 128 wide, 4 heads).
MODEL_SIZES: dict[str, dict[str, int]] = {
    "tiny": {"n_layer": 2, "n_head": 4, "n_embd": 128},
    "small": {"n_layer": 4, "n_head": 4, "n_embd": 256},
    "gpt2": {"n_layer": 12, "n_head": 12, "n_embd": 768},
}


class LoraConfig(Frozen):
    """LoRA adapters on a `transformers` policy (`pip install -e '.[lora]'`, peft)."""

    r: int = Field(8, ge=1, description="adapter rank")
    alpha: float = Field(16.0, gt=0.0, description="scaling numerator (the update is alpha / r * B A)")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the adapter's input")
    target_modules: list[str] | str = Field(
        "all-linear",
        description="module names to adapt (e.g. [q_proj, v_proj]); 'all-linear': every linear layer",
    )


class _ModelBase(Frozen):
    """Keys every policy reads."""

    source: str = Field(
        description="the policy: builtin, the bundled character GPT; hf, a transformers causal LM"
    )
    block_size: int = Field(256, ge=16, description="max tokens in BOS+prompt+SEP+completion+EOS")
    gradient_checkpointing: bool = Field(
        False, description="recompute activations in the backward pass (hf: the model's own switch)"
    )
    compile: bool = Field(
        False, description="torch.compile the training forward (CUDA cc>=7, or CPU with a C++ compiler)"
    )
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2"] = Field(
        "auto",
        description="attention kernel: sdpa, torch's fused one; eager, explicit matmuls; flash_attention_2 (hf "
        "only, needs flash-attn on a GPU); auto: eager on a CPU computing in bf16 or fp16, where the fused "
        "kernel is slow, or for the built-in GPT on a CPU with block_size <= 256, where eager is faster; else sdpa",
    )
    shared_prefix: bool = Field(
        True,
        description="GRPO's log-prob passes (reference and update) run each group's prompt through the model "
        "once for its K completions instead of K times (hf: through the model's KV cache); the same log-probs "
        "up to float rounding",
    )

    @model_validator(mode="before")
    @classmethod
    def _older_flat_keys(cls, data: Any) -> Any:
        # Before the variants, a resolved config.yaml held every key of both; a run directory written
        # then holds the other variant's keys, all of them, never read: they are dropped, not refused.
        other = _OTHER_MODEL_KEYS.get(cls.__name__, ())
        if isinstance(data, dict) and other and all(k in data for k in other):
            data = {k: v for k, v in data.items() if k not in other}
        return data


class BuiltinModelConfig(_ModelBase):
    """`source: builtin`: the bundled character GPT; `size` fills n_layer/n_head/n_embd unless they are given."""

    source: Literal["builtin"] = Field(
        "builtin", description="builtin: the bundled character GPT (hf: a transformers causal LM)"
    )
    size: Literal["tiny", "small", "gpt2", "custom"] = Field(
        "tiny",
        description="named shape: tiny (2 layers, 4 heads, 128 wide), small (4, 4, 256), gpt2 (12, 12, 768); "
        "custom: n_layer/n_head/n_embd as given",
    )
    n_layer: int = Field(2, ge=1, description="transformer blocks (default: the size's)")
    n_head: int = Field(
        4, ge=1, description="attention heads per block; must divide n_embd (default: the size's)"
    )
    n_embd: int = Field(128, ge=8, description="embedding width (default: the size's)")
    dropout: float = Field(
        0.0, ge=0.0, lt=1.0, description="dropout on embeddings, attention and MLP outputs"
    )
    linear_kernel: Literal["auto", "onednn", "torch"] = Field(
        "auto",
        description="who multiplies the blocks' linear layers in fp32 on a CPU: torch (MKL), or oneDNN, whose "
        "kernels follow the CPU's instruction sets where MKL's follow its vendor; auto: onednn on an AMD CPU "
        "with AVX-512, else torch",
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_named_size(cls, data: Any) -> Any:
        if isinstance(data, dict):
            size = data.get("size", "tiny")
            if isinstance(size, str) and size in MODEL_SIZES:
                data = {**MODEL_SIZES[size], **data}
        return data

    @model_validator(mode="after")
    def _check_heads(self) -> BuiltinModelConfig:
        if self.attn_implementation == "flash_attention_2":
            raise ValueError(
                "model.attn_implementation=flash_attention_2 is for model.source=hf; "
                "the built-in GPT takes auto, sdpa or eager"
            )
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        return self


class HFModelConfig(_ModelBase):
    """`source: hf`: a `transformers` causal LM (`pip install -e '.[hf]'`), full or with LoRA adapters."""

    source: Literal["hf"] = Field("hf", description="hf: a transformers causal LM from model.path")
    path: str | None = Field(
        None,
        description="a local model directory or a hub id (HF_HUB_OFFLINE honoured); unset: a tiny random "
        "model is made in the run directory",
    )
    revision: str | None = Field(None, description="the hub revision (branch, tag or commit)")
    trust_remote_code: bool = Field(False, description="allow a model's own Python code to run")
    lora: LoraConfig | None = Field(None, description="train LoRA adapters instead of every weight (peft)")
    adapter_path: str | None = Field(None, description="a saved peft adapter to start from")
    reference: Literal["base", "adapter"] = Field(
        "base",
        description="with LoRA: the KL reference is the base model (adapter off, no copy) or the starting "
        "adapter of model.adapter_path, kept frozen",
    )
    unknown_tokens: Literal["refuse", "allow"] = Field(
        "refuse",
        description="refuse: the run stops before it starts when a prompt or target of its data encodes to "
        "the tokenizer's unknown token or does not decode back to itself; allow: train on them anyway",
    )

    @model_validator(mode="after")
    def _check_adapter(self) -> HFModelConfig:
        if self.reference == "adapter" and not (self.lora is not None and self.adapter_path):
            raise ValueError(
                "model.reference=adapter needs model.lora and model.adapter_path (the frozen adapter)"
            )
        if self.adapter_path and self.lora is None:
            raise ValueError("model.adapter_path needs model.lora (the adapter's settings are read from it)")
        return self


_OTHER_MODEL_KEYS = {
    "BuiltinModelConfig": (
        "path",
        "revision",
        "trust_remote_code",
        "lora",
        "adapter_path",
        "reference",
    ),
    "HFModelConfig": ("size", "n_layer", "n_head", "n_embd", "dropout"),
}

# The policy, by `model.source` (builtin when absent).
ModelConfig = tagged_union("source", "builtin", BuiltinModelConfig, HFModelConfig)
