"""An environment that hangs on the policy's moves: each hanging step ends its episode `timeout`
at the step deadline, and once more than the failure share of the batch's episodes failed, the
rest are `abandoned` instead of each waiting out a deadline of its own."""

import threading
from collections import Counter

import pytest
import torch

from rewards.env import LocalEpisodes
from tests.trainer.sampling.chatty_env import Chatty
from trainer.config import SamplingConfig
from trainer.model_config import BuiltinModelConfig
from trainer.policy.builtin import BuiltinPolicy
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.policy.gpt import GPT
from trainer.sampling.episodes import generate_episodes
from trainer.sampling.row_noise import row_keys

pytestmark = pytest.mark.slow

ROWS = [{"turns": 3}, {"turns": 3}, {"turns": 4}, {"turns": 4}]
K = 2
DEADLINE_S = 1.0  # thousands of times what Chatty's step takes


class HangsOnTheSecondTurn(Chatty):
    def step(self, action):
        if int(self.left) < self.first_left:
            threading.Event().wait()
        return super().step(action)

    def reset(self, row):
        self.first_left = int(row["turns"])
        return super().reset(row)


def _statuses(failure_share):
    tok = CharTokenizer(Chatty.alphabet)
    torch.manual_seed(0)
    policy = BuiltinPolicy(GPT(BuiltinModelConfig(size="tiny", block_size=96), tok.vocab_size), tok)
    host = LocalEpisodes(
        HangsOnTheSecondTurn, max_turns=8, step_timeout_s=DEADLINE_S, failure_share=failure_share
    )
    cfg = SamplingConfig(group_size=K, max_new_tokens=60, temperature=1.0)
    keys = row_keys(0, 0, 0, len(ROWS), K, torch.device("cpu"))
    out = generate_episodes(policy, host, ["q:"] * len(ROWS), ROWS, cfg, ["a", "b", "c"], row_keys=keys)
    return out.results, Counter(r.status for r in out.results)


def test_past_the_failure_share_the_rest_of_the_batch_is_abandoned():
    results, statuses = _statuses(0.25)
    failed = statuses["timeout"] + statuses["env_error"]
    assert failed > 0.25 * len(results) and statuses["abandoned"] >= 1, statuses
    assert failed < len(results), "every episode waited out a deadline: nothing was abandoned"
    abandoned = next(r for r in results if r.status == "abandoned")
    assert not abandoned.usable and abandoned.reward == 0.0
    assert abandoned.reason.startswith("abandoned: ") and "pool.error_rate_threshold=0.25" in abandoned.reason


def test_without_a_failure_share_every_hanging_episode_waits_out_its_deadline():
    results, statuses = _statuses(None)
    assert statuses["abandoned"] == 0 and statuses["timeout"] >= 1, statuses
