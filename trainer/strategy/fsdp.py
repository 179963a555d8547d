"""`scaling.strategy: fsdp`: FSDP2 (`torch.distributed.fsdp.fully_shard`) shards each block of the
policy, then its root, over every rank.

Each rank keeps 1/W of every weight, of its gradient and of AdamW's two moments (fp32). A block's
weights are all-gathered for its forward (in `scaling.fsdp.param_dtype`), freed after it (with
`reshard_after_forward`), gathered again for its backward, and its gradients reduce-scattered
(in fp32), averaged over the ranks as DDP averages them: the update's loss scaling is the same
under both. On gloo (CPU) the reduction is forced to a sum followed by FSDP's own division, which
does not depend on the backend's averaging.

- Accumulation: `set_requires_gradient_sync(False)` on all but the last micro-batch of an
  optimiser step (gradients accumulate unsharded on each rank, then reduce-scatter once).
- Clipping and the non-finite guard read the global norm: the norm of the sharded gradients is a
  DTensor reduced over the ranks (`full_tensor`), so every rank clips and skips alike.
- Decoding reads weights outside a module's forward (the built-in GPT's decode step), which a
  sharded module does not allow ("mixed torch.Tensor and DTensor"): `decoding()` unshards every
  FSDP module at once, keeps them whole through the forwards decoding runs, and reshards after.
  The whole policy is then held on each rank in the gathered dtype (the memory plan counts it).
- Every rank starts from rank 0's weights (broadcast before sharding, as DDP does at its start): a
  draw that differed by rank would otherwise be sharded into a mix of the ranks' draws.
- The KL reference (a copy) is sharded the same way; it is made before the policy is sharded and
  takes the policy's shards when GRPO starts (`reference`), so the copy never gathers anything.
  With `grpo.ref_on_cpu` on a GPU its shards live on the CPU (FSDP2's CPUOffloadPolicy).
- State dicts hold whole tensors on rank 0 (`torch.distributed.checkpoint.state_dict`, full and
  offloaded to the CPU), keyed by parameter name: a checkpoint loads at any world size, under
  either strategy, and the export reads it as it reads a DDP run's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from trainer.policy.base import Policy, Reference
from trainer.precision import Precision
from trainer.strategy.config import FSDPConfig
from trainer.strategy.optimizer_state import is_named, to_named, to_numbered
from trainer.strategy.support import fsdp_unavailable_reason
from trainer.strategy.units import shard_units

_DTYPES = {"fp32": None, "bf16": torch.bfloat16}


def resolve_param_dtype(setting: str, precision: Precision, device: torch.device) -> tuple[str, str]:
    """(the dtype blocks are gathered in, why): `auto` is bf16 on a GPU computing in bf16, else fp32
    (on a CPU autocast already computes in the run's precision from fp32 weights)."""
    if setting != "auto":
        return setting, "set in the config"
    if device.type == "cuda" and precision.dtype == "bf16":
        return "bf16", "auto: the run computes in bf16 on a GPU"
    return "fp32", f"auto: the run computes in {precision.dtype} on {device.type}"


def fsdp_modules(module: nn.Module) -> list[nn.Module]:
    """Every module `fully_shard` was applied to under `module` (the root last)."""
    from torch.distributed.fsdp import FSDPModule

    return [m for m in module.modules() if isinstance(m, FSDPModule)][::-1]


class FSDPStrategy:
    """The policy (and its reference copy) sharded over `world` ranks."""

    name = "fsdp"

    def __init__(
        self,
        cfg: FSDPConfig,
        device: torch.device,
        world: int,
        precision: Precision,
        reference_on_cpu: bool | None = None,
    ) -> None:
        """reference_on_cpu: None when no reference copy is made (grpo.beta = 0); else where a copy
        keeps its shards (`grpo.ref_on_cpu`, on a GPU only)."""
        if world < 2:
            raise ValueError(
                "scaling.strategy=fsdp shards the policy over the ranks, and this rank is alone: there is "
                "nothing to shard; use scaling.strategy=ddp (one process)"
            )
        if problem := fsdp_unavailable_reason(device.type):
            raise RuntimeError(problem)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy

        self.cfg, self.device, self.world = cfg, device, world
        self.mesh = init_device_mesh(device.type, (world,))
        self.param_dtype, self.param_dtype_reason = resolve_param_dtype(cfg.param_dtype, precision, device)
        gathered = _DTYPES[self.param_dtype]
        self.mp = MixedPrecisionPolicy(
            param_dtype=gathered, reduce_dtype=torch.float32 if gathered is not None else None
        )
        self.reference_on_cpu = reference_on_cpu
        self.module: nn.Module | None = None
        self._ref: Reference | None = None
        self._reshard: dict[nn.Module, bool] = {}  # each FSDP module's reshard_after_forward
        self._decoding = 0  # decoding contexts open (re-entrant)

    # ------------------------------------------------------------------ sharding
    def wrap(self, policy: Policy) -> nn.Module:
        module = policy.module
        _from_rank0(module, self.device)
        if self.reference_on_cpu is not None:  # copied while whole: the copy never gathers
            self._ref = policy.reference(self.reference_on_cpu)
        self._shard(module, self.cfg.reshard_after_forward, offload=False)
        if self._ref is not None and self._ref.is_copy:
            offload = bool(self.reference_on_cpu) and self.device.type == "cuda"
            self._shard(self._ref.module, True, offload=offload, root_reshards=True)
        self.module = module
        return module

    def _shard(self, module: nn.Module, reshard: bool, offload: bool, root_reshards: bool = False) -> None:
        """fully_shard each block, then the root. root_reshards: the root frees its gathered weights
        after each forward too (a forward-only module: no backward frees them)."""
        from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

        blocks, root = shard_units(module)
        kwargs = {
            "mesh": self.mesh,
            "mp_policy": self.mp,
            "offload_policy": CPUOffloadPolicy() if offload else OffloadPolicy(),
        }
        for block in blocks:
            fully_shard(block, reshard_after_forward=reshard, **kwargs)
            self._reshard[block] = reshard
        fully_shard(root, reshard_after_forward=reshard, **kwargs)
        if root_reshards:
            root.set_reshard_after_forward(True, recurse=False)  # not FSDP's root default (kept gathered)
        self._reshard[root] = root_reshards
        for m in fsdp_modules(module):
            if self.device.type == "cpu":  # gloo: a plain sum, divided by the world size in FSDP
                m.set_force_sum_reduction_for_comms(True)

    # ------------------------------------------------------------------ the update
    def no_sync(self, skip: bool) -> contextlib.AbstractContextManager:
        return self._no_sync() if skip else contextlib.nullcontext()

    @contextlib.contextmanager
    def _no_sync(self) -> Iterator[None]:
        root = fsdp_modules(self.module)[-1]
        root.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            root.set_requires_gradient_sync(True)

    def grad_norm(self, grads: list[Tensor]) -> Tensor:
        norm = torch.nn.utils.get_total_norm(grads, error_if_nonfinite=False, foreach=True)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm

    # ------------------------------------------------------------------ decoding
    @contextlib.contextmanager
    def decoding(self) -> Iterator[None]:
        if self._decoding:
            self._decoding += 1
            try:
                yield
            finally:
                self._decoding -= 1
            return
        modules = fsdp_modules(self.module)
        for m in modules:  # kept whole through every forward decoding runs
            m.set_reshard_after_forward(False, recurse=False)
        handles = [m.unshard(async_op=True) for m in modules]
        for handle in handles:
            if handle is not None:
                handle.wait()
        self._decoding = 1
        try:
            yield
        finally:
            self._decoding = 0
            for m in modules:
                m.reshard()
                m.set_reshard_after_forward(self._reshard[m], recurse=False)

    # ------------------------------------------------------------------ the reference
    def reference(self, policy: Policy, on_cpu: bool) -> Reference:
        ref = self._ref
        if ref is None:
            raise RuntimeError("the fsdp strategy was built without a reference (grpo.beta = 0)")
        if ref.is_copy:
            _copy_shards(policy.module, ref.module)
        return ref

    def reference_pass(self, ref: Reference) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()  # sharded (offloaded shards come to the device per block)

    # ------------------------------------------------------------------ state
    def model_state(self, module: nn.Module) -> dict[str, Tensor]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(module, options=options)

    def load_model_state(self, module: nn.Module, state: dict[str, Tensor]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        # Each tensor is scattered from rank 0 in turn (a collective): in the module's own key order,
        # which every rank shares (a checkpoint's file may list its tensors in any order).
        order = list(module.state_dict())
        ordered = {k: state[k] for k in order if k in state}
        ordered.update((k, v) for k, v in state.items() if k not in ordered)
        set_model_state_dict(module, ordered, options=StateDictOptions(full_state_dict=True))

    def optimizer_state(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        if not optimizer.state:  # never stepped: nothing to gather (DSD would make the state up)
            return to_named(optimizer.state_dict(), module, optimizer)
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(module, optimizer, options=options)

    def load_optimizer_state(
        self, module: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        named = state if is_named(state) else to_named(state, module, optimizer)
        if not named["state"]:
            optimizer.load_state_dict(to_numbered(named, module, optimizer))
            return
        options = StateDictOptions(full_state_dict=True)
        set_optimizer_state_dict(module, optimizer, named, options=options)

    def record(self) -> dict[str, Any]:
        return {
            "strategy": self.name,
            "fsdp_param_dtype": self.param_dtype,
            "fsdp_param_dtype_reason": self.param_dtype_reason,
        }


@torch.no_grad()
def _from_rank0(module: nn.Module, device: torch.device) -> None:
    """Rank 0's weights and buffers on every rank, one tensor at a time (through `device` on NCCL,
    which moves device tensors only)."""
    via = device if dist.get_backend() == "nccl" else torch.device("cpu")
    seen: set[int] = set()
    for t in [*module.parameters(), *module.buffers()]:
        if id(t) in seen:  # tied weights: once
            continue
        seen.add(id(t))
        staged = t.detach().to(via)
        dist.broadcast(staged, src=0)
        if staged.data_ptr() != t.data_ptr():
            t.detach().copy_(staged)


@torch.no_grad()
def _copy_shards(source: nn.Module, target: nn.Module) -> None:
    """Each rank's shards of `source`'s weights into `target`'s (sharded alike): no communication."""
    theirs = dict(target.named_parameters())
    for name, p in source.named_parameters():
        local = p.to_local() if isinstance(p, DTensor) else p
        q = theirs[name]
        (q.to_local() if isinstance(q, DTensor) else q).copy_(local)
    buffers = dict(target.named_buffers())
    for name, b in source.named_buffers():
        buffers[name].copy_(b)
