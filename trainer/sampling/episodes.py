"""Multi-turn sampling: rows that talk with an environment while they decode.

Every sample is one episode. Rows decode together as in `trainer.sampling.sampler` (one cache
column per step, static shapes). A row's turn ends at a stop string (its action is the text
before it) or at EOS (the action, and then the episode, ends there); the rows that ended a turn
at a step go to the environment host together, and each observation comes back as tokens that
the row is fed next, one per step, through the same cache: the environment's tokens are prefilled
into the row's KV cache without being sampled. Decoding goes on until every episode is over or
max_new_tokens (the episode's budget: the policy's tokens and the environment's) is spent.

In the rollout the environment's tokens are real tokens (`attn_mask`) but not the policy's
(`completion_mask` False, old log-prob 0): they are context for the loss, the KL and the entropy,
never a term of them. A row's noise is keyed as in the one-turn sampler, so episodes repeat
exactly for a given seed and step.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from trainer.config import SamplingConfig
from trainer.policy.base import Policy, eval_mode
from trainer.policy.gpt import positions_from_mask
from trainer.sampling.rollout import Rollout
from trainer.sampling.row_noise import StepNoise
from trainer.sampling.sampler import check_prompts, left_pad, prefill, sample_tokens
from trainer.sampling.stop import first_stop


class EpisodeHost(Protocol):
    """Where the episodes of one sampling batch run (`rewards.env.host.LocalEpisodes`)."""

    def start(self, rows: Sequence[Any], prompts: Sequence[str], group_size: int) -> list[bool]:
        """group_size episodes per row (samples row after row); whether each is running."""
        ...

    def step(self, actions: Mapping[int, str]) -> Mapping[int, tuple[str, bool]]:
        """Sample index -> action; returns sample index -> (observation, episode over)."""
        ...

    def finish(self, cut: Mapping[int, tuple[str, str | None]]) -> list[Any]:
        """Every episode's result in sample order (`.reward`, `.usable`, `.status`, `.turns`,
        `.env_s`, `.success`, `.transcript`); cut: sample -> (status, reason) the sampler ended it with."""
        ...


class Episodes(NamedTuple):
    rollout: Rollout
    results: list[Any]  # the host's result per sample
    env_wait_s: float  # seconds the sampler waited on the host


class _Rows:
    """Per-row bookkeeping on the host: the turn's tokens, the observation still to feed, liveness."""

    def __init__(self, running: Sequence[bool]):
        n = len(running)
        self.active = list(running)
        self.turn: list[list[int]] = [[] for _ in range(n)]
        self.forced: list[deque[int]] = [deque() for _ in range(n)]
        self.cut: dict[int, tuple[str, str | None]] = {}

    def next_tokens(self, sampled: list[int], pad_id: int) -> tuple[list[int], list[bool], list[bool]]:
        """The tokens fed at this step (sampled, an observation's, or PAD), and per row whether it is
        the policy's and whether it is real."""
        n = len(sampled)
        fed, policy, live = list(sampled), [False] * n, [False] * n
        for r in range(n):
            if not self.active[r]:
                fed[r] = pad_id
            elif self.forced[r]:
                fed[r], live[r] = self.forced[r].popleft(), True
            else:
                policy[r] = live[r] = True
        return fed, policy, live

    def turns_ended(
        self, fed: list[int], policy: list[bool], tokenizer, stop: Sequence[str]
    ) -> dict[int, tuple[str, bool]]:
        """Rows whose sampled token ended a turn: row -> (action text, ended by EOS)."""
        ended: dict[int, tuple[str, bool]] = {}
        for r, token in enumerate(fed):
            if not policy[r]:
                continue
            if token == tokenizer.eos_id:
                ended[r] = (tokenizer.decode(self.turn[r]), True)
                continue
            self.turn[r].append(token)
            if stop:
                text = tokenizer.decode(self.turn[r])
                at = first_stop(text, stop)
                if at is not None:
                    ended[r] = (text[:at], False)
        return ended

    def answer(
        self, ended: Mapping[int, tuple[str, bool]], replies: Mapping[int, tuple[str, bool]], tokenizer
    ):
        """Queue each observation for its row, or end the row's episode."""
        for r, (_, by_eos) in ended.items():
            observation, over = replies[r]
            self.turn[r] = []
            if over or by_eos:
                self.active[r] = False
                if not over:
                    self.cut[r] = ("ok", None)  # the policy ended the episode with EOS
                continue
            try:
                self.forced[r].extend(tokenizer.encode_observation(observation))
            except ValueError as exc:  # an observation the tokenizer cannot write
                self.active[r] = False
                self.cut[r] = ("env_error", f"observation cannot be tokenized: {exc}")


def generate_episodes(
    policy: Policy,
    host: EpisodeHost,
    prompts: Sequence[str],
    rows: Sequence[Any],
    cfg: SamplingConfig,
    stop: Sequence[str],
    *,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    row_keys: Tensor | None = None,
) -> Episodes:
    """cfg.group_size episodes of each (prompt, row), decoded with `policy` against `host`."""
    tokenizer, k, budget = policy.tokenizer, cfg.group_size, cfg.max_new_tokens
    prompt_ids = [tokenizer.encode_prompt(p) for p in prompts]
    check_prompts(policy, prompt_ids, cfg)
    waited = time.perf_counter()
    state = _Rows(host.start(rows, prompts, k))
    env_wait = time.perf_counter() - waited
    device = next(policy.module.parameters()).device
    ids, mask = left_pad(prompt_ids, tokenizer.pad_id, device)
    n = ids.shape[0] * k
    tokens = torch.full((n, budget), tokenizer.pad_id, dtype=torch.long, device=device)
    logps = torch.zeros((n, budget), dtype=torch.float32, device=device)
    policy_mask = torch.zeros((n, budget), dtype=torch.bool, device=device)
    live_mask = torch.zeros((n, budget), dtype=torch.bool, device=device)
    used = 0
    with torch.no_grad(), eval_mode(policy.module):
        logits, step = prefill(policy, ids, mask, cfg, ids.shape[1] + budget)
        noise = None if (row_keys is None or greedy) else StepNoise(row_keys, logits.shape[-1], budget)
        for t in range(budget):
            if not any(state.active):
                break
            sampled, logp = sample_tokens(
                logits, cfg.temperature, cfg.top_k, greedy, generator, None if noise is None else noise(t)
            )
            fed, policy_now, live_now = state.next_tokens(sampled.tolist(), tokenizer.pad_id)
            ended = state.turns_ended(fed, policy_now, tokenizer, stop)
            if ended:
                waited = time.perf_counter()
                replies = host.step({r: action for r, (action, _) in ended.items()})
                env_wait += time.perf_counter() - waited
                state.answer(ended, replies, tokenizer)
            fed_t = torch.tensor(fed, dtype=torch.long, device=device)
            policy_t = torch.tensor(policy_now, dtype=torch.bool, device=device)
            tokens[:, t], policy_mask[:, t] = fed_t, policy_t
            live_mask[:, t] = torch.tensor(live_now, dtype=torch.bool, device=device)
            logps[:, t] = logp.masked_fill(~policy_t, 0.0)
            used = t + 1
            if used < budget and any(state.active):
                logits = step(fed_t, t)
    used = max(used, 1)  # every episode failed to start: one empty column keeps the shapes usual
    for r, running in enumerate(state.active):
        if running:
            state.cut[r] = ("max_tokens", None)
    waited = time.perf_counter()
    results = host.finish(state.cut)
    env_wait += time.perf_counter() - waited
    rollout = _rollout(
        ids, mask, tokens[:, :used], logps[:, :used], policy_mask[:, :used], live_mask[:, :used], k
    )
    return Episodes(rollout, results, env_wait)


def _rollout(
    ids: Tensor, mask: Tensor, tokens: Tensor, logps: Tensor, policy_mask: Tensor, live: Tensor, k: int
) -> Rollout:
    attn_mask = torch.cat([mask.repeat_interleave(k, dim=0), live], dim=1)
    return Rollout(
        input_ids=torch.cat([ids.repeat_interleave(k, dim=0), tokens], dim=1),
        attn_mask=attn_mask,
        position_ids=positions_from_mask(attn_mask),
        completion_mask=policy_mask,
        old_logprobs=logps,
        prompt_len=ids.shape[1],
        group_size=k,
    )
