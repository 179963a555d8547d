"""Multi-turn sampling: rows that talk with an environment while they decode.

Every sample is one episode. Rows decode together as in `trainer.sampling.sampler` (one cache
column per step, static shapes). A row's turn ends at a stop string (its action is the text
before it) or at EOS (the action, and then the episode, ends there); the rows that ended a turn
at a step go to the environment host together, and each observation comes back as tokens that
the row is fed next, one per step, through the same cache: the environment's tokens are prefilled
into the row's KV cache without being sampled. Decoding goes on until every episode is over or
max_new_tokens (the episode's budget: the policy's tokens and the environment's) is spent.

A host may name a failure share (`failure_share`: the run's `pool.error_rate_threshold`, with
`failure_share_key` naming it): once the episodes of one call here that ended env_error or timeout
(`failed()`) are more than that share of all its episodes, the rest end `abandoned` (not played
on, not trained on, not counted as failures), so an environment that hangs on most episodes costs
a few deadlines, not one per episode; the step's own rule then fails the run.

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
from trainer.sampling.rollout import Rollout
from trainer.sampling.row_noise import StepNoise
from trainer.sampling.sampler import check_prompts, lay_out, left_pad, prefill, sample_tokens
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

    # A host may also have `failed() -> int` (episodes of its batch ended env_error or timeout so
    # far) with `failure_share` and `failure_share_key`: what `_Abandon` reads.
    # A host whose answers come from elsewhere (the reward pool) may also have `submit(actions) ->
    # handle` and `collect(handle) -> answers` (`step` without waiting), and `fresh() -> host` (another
    # host on the same resources): micro-batches then decode interleaved (`generate_episode_batches`).
    # An `aggregate_metrics` attribute (the environment's own, or None) makes the episode infos'
    # figures (`trainer.grpo.episode_rewards.own_env_metrics`).


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


class _Columns:
    """What each decoding step fed every row: the token, whether it was the policy's, whether it is
    real (attended to), and the sampled log-prob; `rollout` lays them out."""

    def __init__(self, n: int, budget: int, pad_id: int, device: torch.device):
        self.tokens = torch.full((n, budget), pad_id, dtype=torch.long, device=device)
        self.logps = torch.zeros((n, budget), dtype=torch.float32, device=device)
        self.policy = torch.zeros((n, budget), dtype=torch.bool, device=device)
        self.live = torch.zeros((n, budget), dtype=torch.bool, device=device)
        self.used, self.device = 0, device

    def put(self, t: int, fed: list[int], policy: list[bool], live: list[bool], logp: Tensor) -> Tensor:
        """Column t; returns the tokens fed, as the next decoding step's input."""
        fed_t = torch.tensor(fed, dtype=torch.long, device=self.device)
        self.tokens[:, t], self.logps[:, t] = fed_t, logp
        self.policy[:, t] = torch.tensor(policy, dtype=torch.bool, device=self.device)
        self.live[:, t] = torch.tensor(live, dtype=torch.bool, device=self.device)
        self.used = t + 1
        return fed_t

    def rollout(self, ids: Tensor, mask: Tensor, k: int) -> Rollout:
        cols = slice(0, max(self.used, 1))  # every episode failed to start: one empty column
        return lay_out(
            ids, mask, self.tokens[:, cols], self.logps[:, cols], self.policy[:, cols], self.live[:, cols], k
        )


class EpisodeBatch(NamedTuple):
    """One micro-batch of episodes: its prompts, the rows handed to the environment, and each
    sample's noise key (`trainer.sampling.row_noise`; None: the generator, or greedy)."""

    prompts: Sequence[str]
    rows: Sequence[Any]
    row_keys: Tensor | None = None


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
    batch = EpisodeBatch(prompts, rows, row_keys)
    return generate_episode_batches(policy, host, [batch], cfg, stop, greedy=greedy, generator=generator)[0]


def generate_episode_batches(
    policy: Policy,
    host: EpisodeHost,
    batches: Sequence[EpisodeBatch],
    cfg: SamplingConfig,
    stop: Sequence[str],
    *,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    together: int = 2,
) -> list[Episodes]:
    """Each micro-batch's episodes. Up to `together` micro-batches decode interleaved when the host
    answers asynchronously (`submit`/`collect`: episodes on the reward pool): while one waits for
    its environments' answers, the next decodes. Each row's tokens are those it would get alone
    (its noise is its own), so the interleaving changes timings only. A compiled decode step keeps
    one static cache, so it decodes one micro-batch at a time."""
    width = together if (hasattr(host, "submit") and hasattr(host, "fresh") and not cfg.compile) else 1
    how = _Sampling(cfg, stop, greedy, generator)
    abandon = _Abandon(host, sum(len(b.prompts) for b in batches) * cfg.group_size)
    out: list[Episodes] = []
    with torch.no_grad(), eval_mode(policy.module):  # around every lane: their decoders interleave
        for first in range(0, len(batches), width):
            window = batches[first : first + width]
            hosts = [host, *(host.fresh() for _ in window[1:])]
            lanes = [_Lane(policy, h, b, how) for h, b in zip(hosts, window, strict=True)]
            for lane in lanes:  # each decodes up to its first turn's end; its calls go out
                abandon.check(lanes) or lane.run(None)
            while not all(lane.done for lane in lanes):
                for lane in lanes:
                    if not lane.done:
                        lane.run(lane.answers())
                    abandon.check(lanes)
            abandon.closed(lanes)
            out += [lane.close() for lane in lanes]
    return out


class _Abandon:
    """The rule that ends a call's remaining episodes once too many of them failed (the module's
    docstring): the failed episodes of the lanes closed so far, and those the open ones have."""

    def __init__(self, host: EpisodeHost, episodes: int):
        share = getattr(host, "failure_share", None)
        self.limit = None if share is None or not hasattr(host, "failed") else share * episodes
        self.key = getattr(host, "failure_share_key", "the failure share")
        self.share, self.episodes, self.failed_before, self.reason = share, episodes, 0, None

    def check(self, lanes: Sequence[_Lane]) -> bool:
        """Whether the call's episodes are abandoned (the open lanes are then ended)."""
        if self.limit is None:
            return False
        if self.reason is None:
            failed = self.failed_before + sum(lane.host.failed() for lane in lanes)
            if failed <= self.limit:
                return False
            self.reason = (
                f"abandoned: {failed} of the batch's {self.episodes} episodes ended env_error or timeout, "
                f"more than {self.key}={self.share:g} of them"
            )
        for lane in lanes:
            if not lane.done:
                lane.abandon(self.reason)
        return True

    def closed(self, lanes: Sequence[_Lane]) -> None:
        """Before the lanes close (their hosts then forget the batch): keep their failed count."""
        if self.limit is not None:
            self.failed_before += sum(lane.host.failed() for lane in lanes)


class _Sampling(NamedTuple):
    cfg: SamplingConfig
    stop: Sequence[str]
    greedy: bool
    generator: torch.Generator | None


class _Lane:
    """One micro-batch's episodes being decoded: a decoder that stops where rows await answers."""

    def __init__(self, policy: Policy, host: EpisodeHost, batch: EpisodeBatch, how: _Sampling):
        tokenizer, cfg, k = policy.tokenizer, how.cfg, how.cfg.group_size
        prompt_ids = [tokenizer.encode_prompt(p) for p in batch.prompts]
        check_prompts(policy, prompt_ids, cfg)
        self.host, self.k, self.wait, self.done, self.handle = host, k, 0.0, False, None
        began = time.perf_counter()
        self.state = _Rows(host.start(batch.rows, batch.prompts, k))
        self.wait += time.perf_counter() - began
        self.ids, self.mask = left_pad(prompt_ids, tokenizer.pad_id, next(policy.module.parameters()).device)
        self.columns = _Columns(self.ids.shape[0] * k, cfg.max_new_tokens, tokenizer.pad_id, self.ids.device)
        logits, step = prefill(policy, self.ids, self.mask, cfg, self.ids.shape[1] + cfg.max_new_tokens)
        self.decoder = _decoding(logits, step, self.state, self.columns, tokenizer, how, batch.row_keys)

    def run(self, replies: Mapping[int, tuple[str, bool]] | None) -> None:
        """Decode (given the answers awaited) until rows await answers again, and ask for them."""
        try:
            actions = self.decoder.send(replies)
        except StopIteration:
            self.done = True
            return
        began = time.perf_counter()
        submit = getattr(self.host, "submit", None)
        self.handle = submit(actions) if submit is not None else self.host.step(actions)
        self.wait += time.perf_counter() - began

    def abandon(self, reason: str) -> None:
        """End the lane now: the answers it awaits are taken (their episodes' records kept), and
        every episode still going ends `abandoned`."""
        if self.handle is not None and getattr(self.host, "collect", None) is not None:
            self.answers()
        self.handle = None
        for r, running in enumerate(self.state.active):
            if running:
                self.state.active[r] = False
                self.state.cut[r] = ("abandoned", reason)
        self.done = True

    def answers(self) -> Mapping[int, tuple[str, bool]]:
        began = time.perf_counter()
        collect = getattr(self.host, "collect", None)
        replies = collect(self.handle) if collect is not None else self.handle
        self.wait += time.perf_counter() - began
        return replies

    def close(self) -> Episodes:
        for r, running in enumerate(self.state.active):
            if running:
                self.state.cut[r] = ("max_tokens", None)
        began = time.perf_counter()
        results = self.host.finish(self.state.cut)
        self.wait += time.perf_counter() - began
        return Episodes(self.columns.rollout(self.ids, self.mask, self.k), results, self.wait)


def _decoding(
    logits, step, state: _Rows, columns: _Columns, tokenizer, how: _Sampling, row_keys: Tensor | None
):
    """Decode until every episode is over or the budget is spent; at each step where rows ended a
    turn, yields their actions (row -> text) and is sent their answers (row -> (text, over))."""
    cfg, budget = how.cfg, how.cfg.max_new_tokens
    noise = None if (row_keys is None or how.greedy) else StepNoise(row_keys, logits.shape[-1], budget)
    for t in range(budget):
        if not any(state.active):
            return
        sampled, logp = sample_tokens(
            logits, cfg.temperature, cfg.top_k, how.greedy, how.generator, None if noise is None else noise(t)
        )
        fed, policy_now, live_now = state.next_tokens(sampled.tolist(), tokenizer.pad_id)
        ended = state.turns_ended(fed, policy_now, tokenizer, how.stop)
        if ended:
            replies = yield {r: action for r, (action, _) in ended.items()}
            state.answer(ended, replies, tokenizer)
        fed_t = columns.put(t, fed, policy_now, live_now, logp)
        if t + 1 < budget and any(state.active):
            logits = step(fed_t, t)


def transcript_text(transcript: Sequence[str], stop: Sequence[str]) -> str:
    """An episode after its prompt as the policy saw it: each action with the stop string that ended
    it (the first of `stop`), then the environment's answer."""
    end = stop[0] if stop else ""
    return "".join(x + (end if i % 2 == 0 else "") for i, x in enumerate(transcript[1:]))
