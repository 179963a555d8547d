"""The memory plan: each trainer worker's peak memory, estimated before a run starts.

    python -m service.train --plan [--preset ...] [--set ...]   # prints it, runs nothing

From the policy's shape (`service.model_shape`), the strategy and the number of workers, the
precision, LoRA and the sampling and batch shapes, each phase of a step is summed term by term:

- always held: the fp32 weights, their gradients (kept from one step to the next), AdamW's two
  moments, a KL reference copy, DDP's gradient buckets; under fsdp each is 1/N per worker;
- sampling: the KV cache of one micro-batch (prompts_per_microbatch x group_size rows of the
  longest prompt plus max_new_tokens) and its logits; under fsdp the whole policy gathered in
  scaling.fsdp.param_dtype (decoding reads whole weights);
- reference: the reference's forward over one micro-batch (fsdp gathers it block by block);
- update: one micro-batch's activations kept for the backward, the logits of its completion tokens,
  16-bit copies of the weights that autocast keeps for the backward, and under fsdp the gathered
  blocks (two at a time, and the root's embeddings and head) with their unsharded gradients;
- SFT: the same for one rank's share of sft.batch_size pairs, without the KL reference (built as
  GRPO starts); its step is one backward, which frees the activations as it makes the gradients,
  so the two count once (GRPO's update accumulates over micro-batches: there they add up);
- the process: CUDA's context and the libraries' workspaces on a GPU (1 GiB), the interpreter and
  its libraries on a CPU (1 GiB); on a GPU also the caching allocator's blocks beyond the live
  tensors, 10% of a phase's tensors.

The longest prompt is the data's where the caller knows it (the preflight measures the held-out
prompts), else the most model.block_size leaves beside max_new_tokens. With model.shared_prefix
the log-prob passes take each group's prompt once. The peak is the largest phase. A run whose peak exceeds its device (`scaling.device_memory_gib`,
else this machine's GPU, or on a CPU this machine's memory shared among the workers) is refused in
one line naming the estimate, its largest term and what would fit (fsdp, more workers, LoRA,
gradient checkpointing, fewer rows at a time). Activations are counted per token and layer as
14 x width + 2 x the MLP's width values, 4 x for a gated MLP (attention by a fused kernel, which
keeps no scores): an estimate checked against measured peaks by the benchmark's `fsdp` rows (CPU)
and `gpu_memory` rows (CUDA). The held terms are exact: `tests/service/test_memory_plan.py` and
`tests/service/test_train_fsdp.py` compare them with the tensors a trainer holds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from service.config_keys import ConfigError
from service.model_shape import ModelShape

if TYPE_CHECKING:
    from service.config import ServiceConfig

GIB = 1 << 30
PROCESS_BYTES = GIB
LOGIT_COPIES = 3  # fp32 logits, their log-softmax and its gradient
MORE_WORKERS = (2, 4, 8, 16, 32, 64)
# On a GPU, PyTorch's caching allocator reserves more than the live tensors: 5-10% more at a GRPO
# step's peak on an H200 (`python -m bench.cuda_rows --sections gpu_memory`), counted at the top.
ALLOCATOR_SLACK = 0.10
ALLOCATOR_TERM = "allocator's cached blocks"
PROCESS_TERMS = ("process (CUDA context, workspaces)", "process (interpreter, libraries)")


@dataclass(frozen=True)
class Phase:
    """One phase of a step and what a worker holds during it, term by term (bytes)."""

    name: str
    terms: dict[str, float]

    @property
    def total(self) -> float:
        return sum(self.terms.values())


@dataclass(frozen=True)
class MemoryPlan:
    """Each phase of a run's step on one worker, and the device it must fit."""

    strategy: str
    workers: int
    phases: list[Phase]
    capacity: float | None = None  # bytes of one worker's device; None: not known here
    capacity_from: str = ""
    prompt_tokens: int = 0  # the longest prompt the plan assumed
    held: dict[str, float] = field(default_factory=dict)  # what a worker keeps through every phase

    @property
    def peak(self) -> Phase:
        return max(self.phases, key=lambda p: p.total)

    @property
    def largest_term(self) -> tuple[str, float]:
        return max(self.peak.terms.items(), key=lambda kv: kv[1])

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.peak.total <= self.capacity


def tensors(phase: Phase) -> float:
    """The bytes of a phase's tensors: its total less the process's and the allocator's terms."""
    return sum(v for k, v in phase.terms.items() if k not in (*PROCESS_TERMS, ALLOCATOR_TERM))


def _bytes16(dtype: str) -> int:
    return 2 if dtype in ("bf16", "fp16") else 4


def compute_dtype(cfg: ServiceConfig) -> str:
    """What the run computes in, for sizes: `auto` is bf16 on a GPU; on a CPU fp32 (the larger)."""
    dtype = cfg.precision.dtype
    if dtype == "auto":
        return "bf16" if cfg.scaling.use_gpu else "fp32"
    return dtype


def gathered_dtype(cfg: ServiceConfig, strategy: str) -> str:
    """The dtype fsdp gathers weights in (`trainer.strategy.fsdp.resolve_param_dtype`)."""
    fsdp = cfg.scaling.fsdp
    setting = fsdp.param_dtype if fsdp is not None and strategy == "fsdp" else "auto"
    if setting != "auto":
        return setting
    return "bf16" if cfg.scaling.use_gpu and compute_dtype(cfg) == "bf16" else "fp32"


def _activations(cfg: ServiceConfig, shape: ModelShape, rows: float, tokens: float, e: int) -> float:
    """Bytes kept for the backward by a forward over `rows` x `tokens`."""
    # a gated MLP keeps its gate, its up projection, the gate's activation and their product
    per_layer = 14 * shape.width + (4 if shape.gated_mlp else 2) * shape.mlp_width
    if cfg.model.gradient_checkpointing:  # each block's input, and one block recomputed at a time
        return rows * tokens * (shape.layers * shape.width + per_layer) * e
    return rows * tokens * shape.layers * per_layer * e


def prompt_bound(cfg: ServiceConfig, prompt_tokens: int | None) -> int:
    """The longest prompt in tokens: the data's when known, else what block_size leaves for it."""
    most = max(1, cfg.model.block_size - cfg.sampling.max_new_tokens)
    return most if prompt_tokens is None else min(most, prompt_tokens)


def estimate(
    cfg: ServiceConfig,
    shape: ModelShape,
    strategy: str | None = None,
    workers: int | None = None,
    prompt_tokens: int | None = None,
) -> MemoryPlan:
    """The plan of `cfg` (or of it with another strategy or number of workers); prompt_tokens: the
    data's longest prompt (None: the most block_size leaves)."""
    strategy = strategy or cfg.scaling.strategy
    workers = workers or cfg.scaling.num_workers
    fsdp = strategy == "fsdp"
    share = workers if fsdp else 1
    e = _bytes16(compute_dtype(cfg))
    pb = _bytes16(gathered_dtype(cfg, strategy)) if fsdp else 4  # ddp computes from the fp32 weights
    p, t = shape.params, shape.trainable
    s, g = cfg.sampling, cfg.grpo
    prompt = prompt_bound(cfg, prompt_tokens)
    tokens = prompt + s.max_new_tokens  # a sampled row; an SFT pair at most as long
    # the log-prob passes' columns per row: each group's prompt once with model.shared_prefix
    scored = s.max_new_tokens + (prompt / s.group_size if cfg.model.shared_prefix else prompt)
    gpu = cfg.scaling.use_gpu
    reference = g.beta > 0 and g.steps > 0 and shape.reference_copy
    ref_moves = reference and cfg.grpo.ref_on_cpu and gpu and not fsdp  # on the device for its pass only

    held = {"weights (fp32)": p * 4 / share, "gradients": t * 4 / share, "AdamW moments": t * 8 / share}
    if reference and not ref_moves and not (fsdp and cfg.grpo.ref_on_cpu and gpu):
        held["KL reference copy"] = p * 4 / share
    if not fsdp and workers > 1:
        held["DDP gradient buckets"] = t * 4
    held[PROCESS_TERMS[0] if gpu else PROCESS_TERMS[1]] = PROCESS_BYTES

    rows = s.prompts_per_microbatch * s.group_size
    gathered_blocks = (2 * shape.largest_block + shape.root) * pb
    if fsdp and not (cfg.scaling.fsdp and not cfg.scaling.fsdp.reshard_after_forward):
        in_flight = {
            "gathered blocks": gathered_blocks,
            "unsharded block gradients": 2 * shape.largest_block * 4,
        }
    elif fsdp:
        in_flight = {"gathered blocks": p * pb, "unsharded block gradients": 2 * shape.largest_block * 4}
    else:
        in_flight = {}
    casts = {"16-bit weight copies (autocast)": p * 2} if e == 2 and pb == 4 else {}

    phases = []
    if g.steps:
        sampling = {
            **held,
            "KV cache": rows * shape.layers * 2 * shape.kv_width * tokens * e,
            "decode logits": rows * shape.vocab * 4 * LOGIT_COPIES,
        }
        if fsdp:
            sampling["whole policy gathered (decoding)"] = p * pb
        phases.append(Phase("sampling", sampling))
        if g.beta > 0:
            ref = {**held, "reference forward": rows * scored * shape.width * e * 4}
            ref["reference logits"] = rows * s.max_new_tokens * shape.vocab * 4 * 2
            if ref_moves:
                ref["KL reference copy (moved in)"] = p * 4
            if fsdp and reference:
                ref["gathered blocks"] = gathered_blocks
            phases.append(Phase("reference", ref))
        update = {**held, **in_flight, **casts}
        update["activations"] = _activations(cfg, shape, rows, scored, e)
        update["logits"] = rows * s.max_new_tokens * shape.vocab * 4 * LOGIT_COPIES
        phases.append(Phase("update", update))
    if cfg.sft.steps:
        sft_rows = cfg.sft.batch_size / workers
        # the KL reference is built as GRPO starts; the step's one backward frees the activations
        # as it makes the gradients (the last step's were freed by zero_grad), so they count once
        sft = {k: v for k, v in held.items() if k not in ("KL reference copy", "gradients")}
        sft.update(in_flight, **casts)
        sft["activations"] = _activations(cfg, shape, sft_rows, tokens, e)
        sft["logits"] = sft_rows * tokens * shape.vocab * 4 * LOGIT_COPIES
        if "gradients" in held and held["gradients"] > sft["activations"] + sft["logits"]:
            sft["gradients beyond the activations"] = held["gradients"] - sft["activations"] - sft["logits"]
        phases.append(Phase("sft", sft))
    if not phases:
        phases.append(Phase("idle", held))
    if gpu:  # the caching allocator's blocks beyond the live tensors
        phases = [Phase(p.name, {**p.terms, ALLOCATOR_TERM: ALLOCATOR_SLACK * tensors(p)}) for p in phases]
    capacity, where = device_capacity(cfg, workers)
    return MemoryPlan(strategy, workers, phases, capacity, where, prompt, held)


def device_capacity(cfg: ServiceConfig, workers: int) -> tuple[float | None, str]:
    """(bytes of one worker's device, where the figure comes from); None when not known here."""
    given = cfg.scaling.device_memory_gib
    if given is not None:
        return given * GIB, f"scaling.device_memory_gib={given:g}"
    if cfg.scaling.use_gpu:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            return float(props.total_memory), f"this machine's {props.name}"
        return None, "no GPU on this machine: set scaling.device_memory_gib to check"
    if os.environ.get("RAY_ADDRESS"):
        return None, "the cluster's nodes: set scaling.device_memory_gib to check"
    total = _host_memory()
    if total is None:
        return None, "this machine's memory is unknown"
    return total / workers, f"this machine's {total / GIB:.1f} GiB shared by {workers} worker(s)"


def _host_memory() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _with(cfg: ServiceConfig, section: str, **values) -> ServiceConfig:
    return cfg.model_copy(update={section: getattr(cfg, section).model_copy(update=values)})


def _alternatives(
    cfg: ServiceConfig, shape_of: Callable[[ServiceConfig], ModelShape], prompt_tokens: int | None
) -> list[str]:
    """What would fit a device the run does not fit: fsdp (with as many workers as it takes), LoRA,
    gradient checkpointing, fewer rows per micro-batch."""
    shape = shape_of(cfg)
    found = []
    workers = cfg.scaling.num_workers

    def fits(
        c: ServiceConfig, strategy: str | None = None, n: int | None = None, s: ModelShape = shape
    ) -> str:
        plan = estimate(c, s, strategy, n, prompt_tokens)
        return _gib(plan.peak.total) if plan.fits else ""

    if shape.unshardable is None:
        if cfg.scaling.strategy == "ddp" and workers > 1 and (size := fits(cfg, "fsdp", workers)):
            found.append(f"scaling.strategy=fsdp ({size} per worker)")
        for more in (w for w in MORE_WORKERS if w > workers):
            if size := fits(cfg, "fsdp", more):
                found.append(f"scaling.strategy=fsdp with scaling.num_workers={more} ({size})")
                break
    if cfg.model.source == "hf" and cfg.model.lora is None:
        lora = _with(cfg, "model", lora=_default_lora())
        if size := fits(lora, s=shape_of(lora)):
            found.append(f"model.lora ({size} per worker)")
    if not cfg.model.gradient_checkpointing and (
        size := fits(_with(cfg, "model", gradient_checkpointing=True))
    ):
        found.append(f"model.gradient_checkpointing=true ({size} per worker)")
    for strategy in dict.fromkeys([cfg.scaling.strategy, "fsdp" if shape.unshardable is None else "ddp"]):
        n = cfg.sampling.prompts_per_microbatch // 2
        while n >= 1 and not found:  # fewer rows at a time, under fsdp when nothing else fits
            if size := fits(_with(cfg, "sampling", prompts_per_microbatch=n), strategy):
                also = "" if strategy == cfg.scaling.strategy else f"scaling.strategy={strategy} and "
                found.append(f"{also}sampling.prompts_per_microbatch={n} ({size} per worker)")
            n //= 2
    return found


def _default_lora():
    from trainer.model_config import LoraConfig

    return LoraConfig()


def refusal(plan: MemoryPlan, alternatives: list[str]) -> str:
    """The one line refusing a run that does not fit."""
    name, size = plan.largest_term
    fits = (
        "; it would fit with " + ", or ".join(alternatives) if alternatives else "; nothing tried here fits"
    )
    return (
        f"memory plan: each trainer worker needs about {_gib(plan.peak.total)} at its peak ({plan.peak.name}: "
        f"{name} {_gib(size)} the largest term) under scaling.strategy={plan.strategy} with {plan.workers} "
        f"worker(s), more than its {_gib(plan.capacity or 0)} ({plan.capacity_from}){fits}"
    )


def check_memory(
    cfg: ServiceConfig, vocab: int | None, prompt_tokens: int | None = None
) -> MemoryPlan | None:
    """The run's plan (None for a model that cannot be sized here); ConfigError (one line) when
    fsdp cannot shard the model or the run does not fit. vocab: the built-in GPT's; prompt_tokens:
    the data's longest prompt, where known."""
    from service.model_shape import model_shape

    def shape_of(c: ServiceConfig) -> ModelShape:
        return model_shape(c, vocab)

    try:
        shape = shape_of(cfg)
    except (OSError, ValueError, ImportError):  # a model that does not load: the model checks say why, later
        return None
    if cfg.scaling.strategy == "fsdp" and shape.unshardable:
        raise ConfigError(shape.unshardable)
    plan = estimate(cfg, shape, prompt_tokens=prompt_tokens)
    if plan.fits is False:
        raise ConfigError(refusal(plan, _alternatives(cfg, shape_of, prompt_tokens)))
    return plan


def render(cfg: ServiceConfig, shape: ModelShape, prompt_tokens: int | None = None) -> str:
    """The plan as `--plan` prints it: the configured strategy and, with 2 or more workers, the other."""
    strategies = [cfg.scaling.strategy]
    if cfg.scaling.num_workers > 1:
        strategies.append("fsdp" if strategies[0] == "ddp" else "ddp")
    plans = [estimate(cfg, shape, name, prompt_tokens=prompt_tokens) for name in strategies]
    trained = "" if shape.trainable == shape.params else f", {shape.trainable / 1e6:,.1f}M trained"
    lines = [
        f"memory plan per trainer worker: {shape.params / 1e6:,.1f}M parameters{trained}, "
        f"{cfg.scaling.num_workers} worker(s), computing in {compute_dtype(cfg)}; prompts of up to "
        f"{plans[0].prompt_tokens} tokens{'' if prompt_tokens else ' (what model.block_size leaves)'} "
        f"and {cfg.sampling.max_new_tokens} new",
    ]
    for plan in plans:
        mark = "" if plan.strategy == cfg.scaling.strategy else " (for comparison)"
        gathered = f", gathered in {gathered_dtype(cfg, 'fsdp')}" if plan.strategy == "fsdp" else ""
        lines.append(f"\n{plan.strategy}{gathered}{mark}:")
        for phase in plan.phases:
            lines.append(f"  {phase.name:<10} {_gib(phase.total):>10}")
        lines.append(f"  peak: {phase_terms(plan.peak)}")
        if plan.fits is not None:
            verdict = "fits" if plan.fits else "does not fit"
            lines.append(f"  {verdict} {_gib(plan.capacity)} ({plan.capacity_from})")
        else:
            lines.append(f"  device: {plan.capacity_from}")
    if cfg.scaling.strategy == "fsdp" and shape.unshardable:
        lines.append(f"\nrefused: {shape.unshardable}")
    return "\n".join(lines)


def phase_terms(phase: Phase) -> str:
    """A phase's total and its terms, largest first."""
    parts = sorted(phase.terms.items(), key=lambda kv: -kv[1])
    return f"{phase.name} {_gib(phase.total)} = " + " + ".join(f"{name} {_gib(v)}" for name, v in parts)


def run_inputs(cfg: ServiceConfig, task, eval_pairs) -> tuple[int | None, int | None]:
    """(the built-in GPT's vocabulary, the held-out prompts' longest in tokens) of a run: exact for
    the built-in character tokenizer; for a transformers tokenizer an upper bound (a token covers one
    character or more, and BOS/SEP or a chat template's turn markers come around it)."""
    prompts = [p.prompt for p in eval_pairs]
    longest = max((len(p) for p in prompts), default=0)
    if cfg.model.source == "hf":
        return None, longest + (64 if cfg.task.chat_template else 8)
    from trainer.policy.char_tokenizer import CharTokenizer

    return CharTokenizer(task.alphabet).vocab_size, longest + 2


def print_plan(cfg: ServiceConfig, task, eval_pairs) -> int:
    """`python -m service.train --plan`: the plan on stdout; 0, or 2 with one line on stderr when
    the model cannot be sized (a config.json that does not load)."""
    import sys

    from service.model_shape import model_shape

    vocab, prompt_tokens = run_inputs(cfg, task, eval_pairs)
    try:
        shape = model_shape(cfg, vocab)
    except (OSError, ValueError, ImportError) as exc:
        print(f"config error: model.path: cannot size {cfg.model.path!r}: {exc}", file=sys.stderr)
        return 2
    print(render(cfg, shape, prompt_tokens))
    return 0
