"""What the sampler, the log-prob pass, the update, evaluation and checkpoints need of a policy.

A policy is a causal LM behind this one interface; the GRPO maths take its tensors and never learn
which policy they serve. Two implement it: the built-in GPT (`trainer.policy.builtin`) and a
`transformers` model (`trainer.policy.hf`, imported only when asked for).

- `module` is what is trained, wrapped in DDP and checkpointed (`state_dict`); its forward is
  `module(ids [B, T], position_ids [B, T] | None, attn_mask [B, T] bool | None, logits_to_keep=0)
  -> logits [B, T, V]` (`logits_to_keep` > 0: only the last that many positions, `transformers`' name).
  Positions count real tokens (left pads get 0), so a left-padded row gives the logits it would
  alone. With `shared_prefix` the forward also takes `shared_prefix=(K, P)` (both policies).
- `decoder(...)` prefills a batch of left-padded prompts into a fresh cache, repeats each prompt's
  cache for its K completions, and returns the first next-token logits and a one-token step.
- `reference(on_cpu)` is the frozen KL reference: a module and the context to run it in.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

from torch import Tensor, nn

from trainer.config import SamplingConfig

Step = Callable[[Tensor, int], Tensor]  # (tokens [N], step index) -> next logits [N, V]


class PromptFormat(NamedTuple):
    """How a prompt's text becomes the model's input (read by tokenizers that have a chat template)."""

    chat_template: bool = False  # render the prompt as a user message through the chat template
    system: str | None = None  # an optional system message before it


class PolicyTokenizer(Protocol):
    pad_id: int
    eos_id: int
    vocab_size: int

    def encode_prompt(self, prompt: str) -> list[int]:
        """The ids the sampler is given; the completion follows them."""
        ...

    def encode_pair(self, prompt: str, target: str) -> tuple[list[int], list[bool]]:
        """Prompt then target then EOS, and the loss mask (True on the target and the EOS)."""
        ...

    def encode_text(self, text: str) -> list[int]:
        """Ids of text that goes into a sequence as it is."""
        ...

    def encode_observation(self, text: str) -> list[int]:
        """Ids of an environment's answer after the policy's turn (through the chat template,
        as a user message, where prompts are rendered through it)."""
        ...

    def decode(self, ids: Iterable[int], stop_at_eos: bool = True) -> str: ...


@dataclass
class Reference:
    """The KL reference: run `module` inside `context()` (a frozen copy, or the policy itself with
    its adapter switched off)."""

    module: nn.Module
    context: Callable[[], contextlib.AbstractContextManager] = field(default=contextlib.nullcontext)
    is_copy: bool = True  # a separate module (its weights are checkpointed; it may live on the CPU)


@runtime_checkable
class Policy(Protocol):
    module: nn.Module
    tokenizer: PolicyTokenizer
    positions_key: str  # what sets max_positions, for messages ("model.block_size")

    @property
    def shared_prefix(self) -> bool:
        """Whether `module`'s forward takes `shared_prefix=(K, P)`: rows in groups of K sharing
        their first P columns, each group's prompt computed once (`completion_logprobs`)."""
        ...

    @property
    def vocab_size(self) -> int:
        """Width of the logits."""
        ...

    @property
    def max_positions(self) -> int:
        """Longest sequence (prompt + completion) the model can take."""
        ...

    @property
    def width(self) -> int:
        """Hidden size: what `precision.dtype: auto` weighs on a CPU with AMX."""
        ...

    def decoder(self, ids: Tensor, mask: Tensor, cfg: SamplingConfig, max_len: int) -> tuple[Tensor, Step]:
        """First logits `[B*K, V]` of left-padded prompts ids/mask `[B, P]`, and the cached step."""
        ...

    def set_attention(self, implementation: str) -> None:
        """Compute attention with 'sdpa', 'eager' (or, hf only, 'flash_attention_2') from now on."""
        ...

    def reference(self, on_cpu: bool) -> Reference: ...

    def export(self, out_dir: str | Path, merge: bool = False) -> Path:
        """Write the policy where other tools load it; returns the directory."""
        ...


def frozen_copy(module: nn.Module, on_cpu: bool) -> Reference:
    """A frozen deep copy of `module` (on the CPU between passes when asked)."""
    ref = copy.deepcopy(module).requires_grad_(False).eval()
    return Reference(ref.to("cpu") if on_cpu else ref)


@contextlib.contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """Sampling never uses dropout; the caller's train/eval mode is restored afterwards."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)
