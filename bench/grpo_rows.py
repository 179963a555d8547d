"""The ablation's rows: one optimisation added per row, from the no-cache baseline through the
fp32 reference to the settings the service ships for this machine.

A row is (name, config updates, trial options); trial options may carry `env` (variables set in
the trial's process before torch loads) and `threads`. Rows up to the reference
(`REFERENCE_ROW`, the `grpo_completions_per_s` headline) keep fp32, no compile, 2 torch threads
and the inherited OpenMP settings; the rows after it add the shipped settings one at a time, and
the last row run is the `grpo_completions_per_s_default` headline.
"""

from __future__ import annotations

import os
from typing import Any

from actors.pool.config import PoolConfig
from actors.run.omp_env import default_threads, resolve_wait_policy
from service.config import ScalingConfig
from service.presets import PRESETS
from trainer.compile import compile_unsupported_reason
from trainer.config import TrainerConfig
from trainer.policy.attention import resolve_attention
from trainer.precision import resolve_dtype, resolve_sampling_dtype

REFERENCE_ROW = (
    "+ fp32 linear layers by the kernel auto picks (oneDNN on AMD with AVX-512; the fp32 reference)"
)
SHARED_PREFIX_ROW = "+ each group's prompt run once in the log-prob passes"
Row = tuple[str, dict[str, Any], dict[str, Any]]


def shipped_settings(device: str) -> dict[str, Any]:
    """Precision, compile, threads and wait policy as the `demo` preset and the config defaults
    give them on `device`, with what they resolve to here."""
    demo = TrainerConfig.model_validate(
        {k: v for k, v in PRESETS["demo"].items() if k in TrainerConfig.model_fields}
    )
    scaling = ScalingConfig.model_validate(PRESETS["demo"].get("scaling", {}))
    placement = PoolConfig.model_validate(PRESETS["demo"].get("pool", {})).placement
    threads = scaling.torch_threads or default_threads(scaling.num_workers)
    env, _ = resolve_wait_policy(
        scaling.omp_wait_policy, workers_on_node=scaling.num_workers, torch_threads=scaling.torch_threads
    )
    waits = {**os.environ, **env}.get("OMP_WAIT_POLICY", "").lower() or "OpenMP's own"  # in the trials
    width = getattr(demo.model, "n_embd", None)
    dtype, reason = resolve_dtype(demo.precision.dtype, device, width)
    decoding, _ = resolve_sampling_dtype(demo.sampling.dtype, dtype, device, width)
    positions = demo.model.block_size if demo.model.source == "builtin" else None
    attention, _ = resolve_attention(demo.model.attn_implementation, device, dtype, positions)
    compilable = compile_unsupported_reason(device) is None
    return {
        "precision.dtype": demo.precision.dtype,
        "precision": dtype,
        "precision_reason": reason,
        "sampling_dtype": decoding,
        "attention": attention,
        "model.compile": demo.model.compile and compilable,
        "sampling.compile": demo.sampling.compile and compilable,
        "torch_threads": threads,
        "omp_wait_policy": scaling.omp_wait_policy,
        "waits": waits,  # passive, active or OpenMP's own
        "sampling_threads": scaling.sampling_threads or "rule",  # unset: `actors.run.threads`' rule
        "env": env,
        "placement": placement,  # where a step's rewards are scored (`pool.placement`)
    }


def reference_rows() -> list[Row]:
    """Baseline to the fp32 reference; the rows before the trimmed log-prob pass run it untrimmed
    (lm-head and log-softmax over every position, entropy under autograd and for the reference)."""
    legacy = {"legacy_logprobs": True}
    mkl = {"model.linear_kernel": "torch"}  # torch's own fp32 products until the reference row
    unshared = {"model.shared_prefix": False, **mkl}  # also what the legacy pass does (and its FLOPs count)
    return [
        (
            "baseline: fp32, no KV cache, serial scoring",
            {"sampling.use_kv_cache": False, **unshared},
            {"rewards": "inline", **legacy},
        ),
        (
            "+ KV cache (prefill per row)",
            {"sampling.prefill": "per_row", **unshared},
            {"rewards": "inline", **legacy},
        ),
        ("+ shared prefill", unshared, {"rewards": "inline", **legacy}),
        ("+ streamed pool scoring", unshared, {"rewards": "pool", **legacy}),
        ("+ log-prob pass only where needed", unshared, {"rewards": "pool"}),
        (SHARED_PREFIX_ROW, mkl, {"rewards": "pool"}),
        (REFERENCE_ROW, {}, {"rewards": "pool"}),
    ]


def _thread_rows(ship: dict[str, Any], device: str, threads: int) -> tuple[list[Row], dict[str, Any]]:
    """The rows for the shipped torch threads, OpenMP wait and decode threads where they differ
    from the reference's, and the trial options every later row keeps."""
    rows: list[Row] = []
    options: dict[str, Any] = {"rewards": "pool"}
    if ship["env"] or ship["torch_threads"] != threads:
        options = {**options, "env": ship["env"], "threads": ship["torch_threads"]}
        name = f"+ threads as shipped ({ship['torch_threads']}, {ship['waits']} wait)"
        rows.append((name, {}, dict(options)))
    # the rule decodes on fewer threads than torch_threads only under a passive wait
    decoding_differs = ship["sampling_threads"] != "rule" or ship["waits"] == "passive"
    if device == "cpu" and ship["torch_threads"] > 1 and decoding_differs:
        options = {**options, "sampling_threads": ship["sampling_threads"]}
        what = {"rule": "one for a small decode step", "auto": "timed at start"}.get(
            ship["sampling_threads"], str(ship["sampling_threads"])
        )
        rows.append((f"+ decode threads as shipped ({what})", {}, dict(options)))
    return rows, options


def shipped_rows(device: str, threads: int, unshipped: bool = True) -> tuple[list[Row], list[str], str]:
    """The rows after the reference that apply here, a note for each one that does not, and the
    name of the row with the shipped settings (`REFERENCE_ROW` when they add nothing to it).

    A compile row is measured wherever compile is supported; when the shipped settings do not
    compile, it comes last, is marked "not shipped", and is left out with `unshipped=False`."""
    ship = shipped_settings(device)
    rows, options = _thread_rows(ship, device, threads)
    notes: list[str] = []
    updates: dict[str, Any] = {}
    if device == "cuda":
        updates = {"precision.tf32": True}
        rows.append(("+ TF32", dict(updates), dict(options)))
    if ship["precision"] != "fp32":
        updates = {**updates, "precision.dtype": ship["precision"]}
        how = f"{ship['attention']} attention, decoding in {ship['sampling_dtype']}"
        rows.append(
            (
                f"+ {ship['precision']} autocast ({how}; {ship['precision_reason']})",
                dict(updates),
                dict(options),
            )
        )
    else:
        notes.append(f"No bf16 row: {ship['precision_reason']}.")
    if ship["placement"] != "pool":  # the reference streams every step's rewards to the pool
        options = {**options, "rewards": ship["placement"]}
        how = "measured per step, in process or on the pool" if ship["placement"] == "auto" else "in process"
        rows.append(
            (f"+ reward placement as shipped ({ship['placement']}: {how})", dict(updates), dict(options))
        )
    shipped_compile = ship["model.compile"] or ship["sampling.compile"]
    default = rows[-1][0] if rows else REFERENCE_ROW
    if compile_unsupported_reason(device) is None and (shipped_compile or unshipped):
        compiled = {**updates, "model.compile": True, "sampling.compile": True}
        name = "+ torch.compile (training forward/backward, decode step)"
        rows.append((name if shipped_compile else name + ", not shipped", compiled, dict(options)))
        default = rows[-1][0] if shipped_compile else default
    else:
        notes.append(f"No compile row: {compile_unsupported_reason(device) or 'not shipped (quick plan)'}.")
    if device == "cuda":
        updates = {**updates, "model.compile": True, "sampling.compile": True, "sampling.cuda_graphs": True}
        rows.append(("+ CUDA graphs of the decode step", dict(updates), dict(options)))
    if unshipped and ship["precision"] == "fp32" and resolve_dtype("auto", device)[0] == "bf16":
        # bf16 hardware that auto leaves off for this model: measured, so the reason can be read
        rows.append(
            (
                "+ bf16 autocast, not shipped (the model is too narrow)",
                {**updates, "precision.dtype": "bf16"},
                dict(options),
            )
        )
    return rows, notes, default
