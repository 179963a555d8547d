"""Typed, frozen configs for every trainer component.

Each component takes only its own config. Values are validated once, here, when the config
is built; derived values come from functions (never from editing a config after the fact).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field, model_validator

from trainer.config_base import Frozen
from trainer.model_config import BuiltinModelConfig, ModelConfig

# Option vocabularies, defined once: the GRPO maths read their allowed values from these.
Scale = Literal["group", "batch", "none"]
LossAgg = Literal["token", "sequence", "constant"]
KLEstimator = Literal["k1", "k2", "k3"]
RatioLevel = Literal["token", "sequence"]
Overlong = Literal["none", "mask", "penalty"]
LRSchedule = Literal["constant", "cosine", "linear"]
# The registered policy losses (`trainer.grpo.policy_losses` asserts that the two agree). A "+" name
# composes its parts (the sequence ratio, the dual-clip bound, truncated-IS weights); each part
# reads one key of GRPOConfig, which is then required, and refused by every other loss.
PolicyLoss = Literal[
    "vanilla", "dual_clip", "gspo", "tis", "dual_clip+tis", "gspo+dual_clip", "gspo+tis", "gspo+dual_clip+tis"
]
_PARAM_PART = {"dual_clip": "dual_clip", "tis": "tis_cap"}  # a name's part -> the key it reads
VARIANT_PARAMS = tuple(_PARAM_PART.values())
POLICY_LOSS_PARAMS: dict[str, tuple[str, ...]] = {
    name: tuple(_PARAM_PART[part] for part in name.split("+") if part in _PARAM_PART)
    for name in get_args(PolicyLoss)
}
DEFAULT_TIS_CAP = 2.0  # a tis loss's cap when grpo.tis_cap is not given
# The losses that correct for the policy that sampled (its log-probs the behaviour policy, the
# trainer's recomputed ones the proximal policy): the only ones a stale batch may be trained with.
CORRECTED_LOSSES = tuple(name for name, params in POLICY_LOSS_PARAMS.items() if "tis_cap" in params)


class DataConfig(Frozen):
    """Seeds and size of the training stream and the held-out set (what the stream holds is the task's)."""

    seed: int = Field(0, description="seed of the training stream (its games, or its shuffle of a file)")
    eval_seed: int = Field(1_000_003, description="seed of the held-out set; disjoint from `seed`")
    eval_size: int = Field(64, ge=1, description="held-out pairs evaluated (greedy) at each evaluation")

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        if self.eval_seed == self.seed:
            raise ValueError("eval_seed must differ from seed (the held-out set must be disjoint)")
        return self


class SamplerActorsConfig(Frozen):
    """The Ray actors that sample beside the trainers (`sampling.placement: actors`)."""

    num: int = Field(
        1,
        ge=1,
        description="sampler actors of each trainer rank (a rank's share of a step is split among its own)",
    )
    cpus_per_actor: float = Field(1.0, gt=0.0, description="logical CPUs Ray reserves per sampler actor")
    gpus_per_actor: float = Field(
        0.0,
        ge=0.0,
        description="GPUs per sampler actor (0: it decodes on CPU); a fraction shares a card with a trainer "
        "worker that asks for the rest of it",
    )
    torch_threads: int | None = Field(
        None, ge=1, description="torch threads of a sampler actor; unset: its cpus_per_actor, at least 1"
    )


class SamplingConfig(Frozen):
    """Generation of K completions per prompt."""

    group_size: int = Field(8, ge=1, description="K: completions per prompt")
    max_new_tokens: int = Field(96, ge=1, description="longest completion sampled (tokens, EOS included)")
    temperature: float = Field(1.0, gt=0.0, description="softmax temperature of sampling")
    top_k: int | None = Field(None, ge=1, description="sample among the k likeliest tokens only; unset: all")
    use_kv_cache: bool = Field(
        True, description="decode with a KV cache (false: recompute the whole prefix each step)"
    )
    prefill: Literal["shared", "per_row"] = Field(
        "shared",
        description="shared: each prompt is prefilled once and its cache copied to its K rows; "
        "per_row: each of the K rows prefills its own copy of the prompt (the ablation of shared)",
    )
    prompts_per_microbatch: int = Field(
        4, ge=1, description="prompts sampled together; scored while the next is sampled"
    )
    compile: bool = Field(
        False, description="torch.compile the decode step (CUDA cc>=7, or CPU with a C++ compiler)"
    )
    cuda_graphs: bool = Field(False, description="CUDA graphs for the decode step (needs compile)")
    dtype: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto",
        description="what decoding (sampling and evaluation) computes in; auto: the run's precision.dtype, but "
        "fp32 on a CPU for a model under 256 wide, where a decode step's small matmuls gain less from bf16 than "
        "its casts cost; the choice is recorded in runtime.json",
    )
    placement: Literal["trainer", "actors"] = Field(
        "trainer",
        description="where a GRPO step's completions are sampled: trainer, by each trainer rank with its live "
        "weights; actors, by Ray sampler actors (sampling.actors) holding weights the trainer sends through "
        "the object store once a step, checked by hash, so sampling can run beside the update "
        "(grpo.max_staleness)",
    )
    actors: SamplerActorsConfig = Field(
        SamplerActorsConfig(), description="the sampler actors of placement: actors"
    )


class GRPOConfig(Frozen):
    """The GRPO objective."""

    steps: int = Field(100, ge=0, description="GRPO steps (0: SFT only)")
    prompts_per_step: int = Field(
        8, ge=1, description="prompts of one GRPO step (each sampled group_size times)"
    )
    scale: Scale = Field(
        "group",
        description="advantage = (reward - group mean) / std of: the group, the whole batch, or none (Dr. GRPO)",
    )
    eps: float = Field(1e-6, gt=0.0, description="added to the std that scales advantages")
    zero_var_groups: Literal["drop", "keep"] = Field(
        "drop",
        description="groups whose rewards are all equal (no signal): drop them from the loss, or keep them",
    )
    zero_var_tol: float = Field(
        1e-6, ge=0.0, description="a group whose reward std is at most this has no signal"
    )
    clip_low: float = Field(0.2, ge=0.0, lt=1.0, description="the ratio is clipped below at 1 - clip_low")
    clip_high: float = Field(
        0.28, ge=0.0, description="the ratio is clipped above at 1 + clip_high (DAPO clip-higher)"
    )
    beta: float = Field(0.04, ge=0.0, description="KL coefficient; 0 builds no reference model")
    ref_on_cpu: bool = Field(False, description="keep the reference model on CPU between forward passes")
    loss_agg: LossAgg = Field(
        "token",
        description="loss over tokens: token, mean over every token of the batch; sequence, mean per completion "
        "then over completions; constant, sum divided by loss_constant (Dr. GRPO)",
    )
    loss_constant: int | None = Field(
        None, ge=1, description="normaliser for loss_agg=constant (default: max_new_tokens)"
    )
    epochs: int = Field(
        1, ge=1, description="optimisation epochs over one step's rollouts (`passes` is an alias)"
    )
    minibatches: int = Field(
        1,
        ge=1,
        description="optimiser steps per epoch, each on a shuffled 1/minibatches share of the rows; "
        "old log-probs stay those of the policy that sampled",
    )
    kl_estimator: KLEstimator = Field(
        "k3",
        description="KL(policy || reference) per token: k1 = log-ratio, k2 = half its square, k3 = exp(-r)+r-1",
    )
    kl_placement: Literal["loss", "reward"] = Field(
        "loss",
        description="beta * KL in the loss, or subtracted from each completion's reward (verl use_kl_in_reward)",
    )
    policy_loss: PolicyLoss = Field(
        "vanilla",
        description="a registered loss (trainer.grpo.policy_losses): vanilla = token ratio, PPO/DAPO clip; "
        "dual_clip = vanilla bounded by dual_clip; gspo = sequence ratio (GSPO); tis = vanilla times "
        "truncated importance weights (tis_cap); 'a+b' composes. Unset: named by the older keys "
        "ratio_level (sequence: gspo), dual_clip, tis_cap",
    )
    dual_clip: float | None = Field(None, gt=1.0, description="dual_clip losses: A < 0 loses at most -c * A")
    tis_cap: float | None = Field(
        None,
        gt=0.0,
        description=f"tis losses: each token's weight min(p_trainer / p_sampler, cap) (AReaL's decoupled "
        f"loss: the sampler's log-probs are the behaviour policy, the trainer's recomputed ones the proximal "
        f"policy); unset: {DEFAULT_TIS_CAP:g} for a tis loss",
    )
    overlong: Overlong = Field(
        "none",
        description="completions cut at max_new_tokens: keep, mask from the loss, or DAPO's soft length penalty",
    )
    overlong_buffer: int = Field(
        16, ge=1, description="penalty: tokens before max_new_tokens where the length penalty ramps up"
    )
    overlong_penalty: float = Field(
        1.0, ge=0.0, description="penalty: reward subtracted at max_new_tokens (linear over the buffer)"
    )
    on_unusable_reward: Literal["drop_group", "fail"] = Field(
        "drop_group", description="a group with a timed-out or errored reward: drop it from the loss, or fail"
    )
    dynamic_sampling_tries: int = Field(
        0,
        ge=0,
        le=16,
        description="when dropped groups leave fewer than prompts_per_step groups with a signal, sample up "
        "to this many more batches of prompts_per_step prompts (DAPO dynamic sampling); 0: off",
    )
    max_staleness: int = Field(
        0,
        ge=0,
        le=8,
        description="policy versions a batch may lag the weights it trains: 0, each step samples with the "
        "weights it updates (synchronous); n > 0 (sampling.placement: actors), the samplers generate batch "
        "s+n with the weights of step s while the trainers update on batch s, and a batch older than n is "
        "never trained on; above 0 only an importance-corrected policy_loss (the tis family) is allowed",
    )
    eval_every: int = Field(20, ge=1, description="GRPO steps between held-out evaluations")
    eval_k: int = Field(
        0,
        ge=0,
        description="held-out completions sampled per prompt at the training temperature for pass@k "
        "and mean@k, at the GRPO start and final evaluations; 0: greedy figures only",
    )
    eval_pass_reward: float = Field(
        1.0, description="a sampled held-out completion passes (pass@k) when its reward is at least this"
    )

    @model_validator(mode="before")
    @classmethod
    def _older_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "passes" in data:
            data = dict(data)
            passes = data.pop("passes")
            if "epochs" in data and data["epochs"] != passes:
                raise ValueError("passes is an alias of epochs: give one of them")
            data["epochs"] = passes
        # A config (or run directory) without policy_loss spells the variant by these keys: it names
        # the loss its keys give, so it keeps its meaning.
        if not isinstance(data, dict) or ("ratio_level" not in data and "policy_loss" in data):
            return _default_tis_cap(data)
        data = dict(data)
        level = data.pop("ratio_level", None)
        if "policy_loss" in data:
            raise ValueError("ratio_level is replaced by policy_loss (sequence: gspo); give one")
        if level not in (None, "token", "sequence"):
            raise ValueError(f"ratio_level {level!r} is not allowed; expected 'token' or 'sequence'")
        given = {"gspo": level == "sequence"} | {p: data.get(k) is not None for p, k in _PARAM_PART.items()}
        data["policy_loss"] = "+".join(part for part, on in given.items() if on) or "vanilla"
        return _default_tis_cap(data)

    @property
    def passes(self) -> int:
        """Optimisation epochs (the older name)."""
        return self.epochs

    @model_validator(mode="after")
    def _check(self) -> GRPOConfig:
        if self.clip_low > self.clip_high:
            raise ValueError(f"clip_low ({self.clip_low}) must be <= clip_high ({self.clip_high})")
        if self.loss_constant is not None and self.loss_agg != "constant":
            raise ValueError("loss_constant is only used with loss_agg='constant'")
        if self.kl_placement == "reward" and self.beta == 0:
            raise ValueError("kl_placement='reward' needs beta > 0 (the KL coefficient)")
        if self.ref_on_cpu and self.beta == 0:
            raise ValueError(
                "ref_on_cpu=true does nothing with beta=0 (no reference model is built); set beta > 0 or ref_on_cpu=false"
            )
        if self.max_staleness and self.policy_loss not in CORRECTED_LOSSES:
            raise ValueError(
                f"max_staleness={self.max_staleness} trains on batches sampled by older weights: it needs an "
                f"importance-corrected policy_loss ({', '.join(CORRECTED_LOSSES)}), got {self.policy_loss!r}"
            )
        used = POLICY_LOSS_PARAMS[self.policy_loss]
        for key in VARIANT_PARAMS:
            if key in used and getattr(self, key) is None:
                raise ValueError(f"policy_loss={self.policy_loss!r} needs {key}")
            if key not in used and getattr(self, key) is not None:
                users = ", ".join(name for name, keys in POLICY_LOSS_PARAMS.items() if key in keys)
                raise ValueError(
                    f"{key} is read only by policy_loss {users}; policy_loss is {self.policy_loss!r}"
                )
        return self


def _default_tis_cap(data: Any) -> Any:
    """`data` with tis_cap = DEFAULT_TIS_CAP where it names a tis loss and no cap."""
    if not isinstance(data, dict) or data.get("tis_cap") is not None:
        return data
    if "tis_cap" not in POLICY_LOSS_PARAMS.get(str(data.get("policy_loss")), ()):
        return data
    return {**data, "tis_cap": DEFAULT_TIS_CAP}


class SFTConfig(Frozen):
    """Supervised warm start on (prompt -> target) pairs."""

    steps: int = Field(200, ge=0, description="supervised steps before GRPO (0: none)")
    batch_size: int = Field(64, ge=1, description="(prompt, target) pairs per SFT step, over all ranks")
    lr: float = Field(1e-3, gt=0.0, description="SFT learning rate (AdamW)")
    warmup_steps: int = Field(20, ge=0, description="linear warm-up steps of the SFT learning rate")
    lr_schedule: LRSchedule = Field(
        "constant",
        description="after warm-up: constant, or cosine / linear decay to min_lr_ratio * lr at the last step",
    )
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0, description="final lr / lr of a cosine or linear decay")


class OptimConfig(Frozen):
    """AdamW for the GRPO phase, clipping and the non-finite guard."""

    lr: float = Field(1e-4, gt=0.0, description="GRPO learning rate (AdamW)")
    betas: tuple[float, float] = Field((0.9, 0.95), description="AdamW's (beta1, beta2)")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW's decoupled weight decay")
    grad_clip: float | None = Field(
        1.0, gt=0.0, description="clip the gradient's global norm to this; unset: no clipping"
    )
    warmup_steps: int = Field(0, ge=0, description="linear warm-up steps of the GRPO learning rate")
    lr_schedule: LRSchedule = Field(
        "constant",
        description="after warm-up: constant, or cosine / linear decay to min_lr_ratio * lr at the last step",
    )
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0, description="final lr / lr of a cosine or linear decay")
    max_consecutive_skips: int = Field(
        5, ge=1, description="stop the run after this many non-finite steps in a row"
    )


class PrecisionConfig(Frozen):
    """Numerics: bf16 = autocast to bfloat16 with fp32 master weights and no GradScaler."""

    dtype: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto",
        description="auto: bf16 where the hardware computes it faster (a CUDA GPU with bf16; a CPU with "
        "AMX tiles and a model at least 256 wide; a CPU with AVX512-BF16 whose bf16 matmuls time at least "
        "2.5x fp32's on one thread, timed once per machine and kept), else fp32; the choice and why are recorded in "
        "the run's runtime.json, and a resumed run keeps the choice of the run it continues",
    )
    tf32: bool = Field(True, description="TF32 matmuls on CUDA")


class CheckpointConfig(Frozen):
    every_steps: int = Field(
        50, ge=1, description="steps between checkpoints (one also at the last step and when the run stops)"
    )
    keep_last: int = Field(3, ge=1, description="checkpoints kept; older ones are deleted")


class TrainerConfig(Frozen):
    """Everything the single-process trainer needs (the service adds reward, pool, scaling, run)."""

    seed: int = Field(0, description="seed of the initial weights and of every sampling draw")
    model: ModelConfig = BuiltinModelConfig()
    data: DataConfig = DataConfig()
    sampling: SamplingConfig = SamplingConfig()
    grpo: GRPOConfig = GRPOConfig()
    sft: SFTConfig = SFTConfig()
    optim: OptimConfig = OptimConfig()
    precision: PrecisionConfig = PrecisionConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()

    @model_validator(mode="after")
    def _check_cross(self) -> TrainerConfig:
        if self.sampling.group_size < 2 and self.grpo.steps > 0:
            # The group mean is subtracted in every scale, so one completion per prompt has advantage 0.
            raise ValueError("sampling.group_size must be >= 2 for GRPO: with K=1 every advantage is 0")
        g, rows = self.grpo, self.grpo.prompts_per_step * self.sampling.group_size
        if g.minibatches > rows:
            raise ValueError(f"grpo.minibatches ({g.minibatches}) must be <= the rows of a step ({rows})")
        if g.overlong == "penalty" and g.overlong_buffer > self.sampling.max_new_tokens:
            raise ValueError(
                f"grpo.overlong_buffer ({g.overlong_buffer}) must be <= sampling.max_new_tokens "
                f"({self.sampling.max_new_tokens})"
            )
        if self.sampling.cuda_graphs and not self.sampling.compile:
            raise ValueError("sampling.cuda_graphs needs sampling.compile=true")
        return self._check_placement()

    def _check_placement(self) -> TrainerConfig:
        """What sampling beside the trainers allows."""
        actors, g = self.sampling.placement == "actors", self.grpo
        if g.max_staleness and not actors:
            raise ValueError(
                f"grpo.max_staleness={g.max_staleness} needs sampling.placement=actors (a trainer rank "
                "samples with the weights it is updating)"
            )
        if actors and g.dynamic_sampling_tries:
            raise ValueError(
                "grpo.dynamic_sampling_tries needs sampling.placement=trainer (sampler actors sample each "
                "step's batch ahead, without the refills); set it to 0 or use placement trainer"
            )
        return self
