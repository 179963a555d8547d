"""Multi-turn sampling: the environment's tokens are context, never a term of the loss, and the
policy's tokens have the log-probs the training forward gives them (built-in and hf policies)."""

import pytest
import torch

from rewards.env import LocalEpisodes
from tests.trainer.sampling.chatty_env import ANSWER, Chatty
from trainer.config import GRPOConfig, SamplingConfig
from trainer.grpo.loss import aggregate_loss
from trainer.grpo.policy_losses import PolicyLossInputs, get_policy_loss
from trainer.model_config import BuiltinModelConfig
from trainer.policy.builtin import BuiltinPolicy
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.policy.gpt import GPT
from trainer.sampling.episodes import generate_episodes
from trainer.sampling.logprobs import completion_logprobs
from trainer.sampling.row_noise import row_keys

STOP = ["a", "b", "c"]  # frequent characters: a random policy ends its turns within a few tokens
ROWS = [{"turns": 3}, {"turns": 2}, {"turns": 4}]


def builtin_policy() -> BuiltinPolicy:
    tok = CharTokenizer(Chatty.alphabet)
    torch.manual_seed(0)
    return BuiltinPolicy(GPT(BuiltinModelConfig(size="tiny", block_size=96), tok.vocab_size), tok)


def episodes(policy, stop=STOP, budget=60, k=2, seed=0):
    host = LocalEpisodes(Chatty, max_turns=8)
    cfg = SamplingConfig(group_size=k, max_new_tokens=budget, temperature=1.0)
    keys = row_keys(seed, 0, 0, len(ROWS), k, torch.device("cpu"))
    return generate_episodes(policy, host, ["q:"] * len(ROWS), ROWS, cfg, stop, row_keys=keys)


def env_positions(rollout, tokenizer) -> torch.Tensor:
    """[N, L] True where the completion holds the environment's answer (found by its text)."""
    answer = tokenizer.encode_text(ANSWER)
    ids = rollout.completion_ids
    found = torch.zeros_like(ids, dtype=torch.bool)
    for r in range(ids.shape[0]):
        row = ids[r].tolist()
        for start in range(len(row) - len(answer) + 1):
            if row[start : start + len(answer)] == answer and not rollout.completion_mask[r, start]:
                found[r, start : start + len(answer)] = True
    return found


def test_every_episode_plays_its_turns_and_the_answers_are_context_only():
    policy = builtin_policy()
    out = episodes(policy)
    r = out.rollout
    assert [e.status for e in out.results] == ["ok"] * 6
    # each plays its row's turns, unless the policy ends it sooner with EOS
    played = [(e.turns, e.done_by_env) for e in out.results]
    assert all(
        t == want if by_env else t <= want
        for (t, by_env), want in zip(played, [3, 3, 2, 2, 4, 4], strict=True)
    )
    assert sum(by_env for _, by_env in played) >= 3
    env = env_positions(r, policy.tokenizer)
    real = r.attn_mask[:, r.prompt_len :]
    # every answer (turns - 1 per episode) is in the sequence: real tokens, outside the policy's mask
    assert int(env.sum()) == sum(e.turns - 1 for e in out.results) * len(ANSWER)
    assert bool(real[env].all()) and not bool(r.completion_mask[env].any())
    assert bool((r.old_logprobs[env] == 0).all())
    # the rest of each real completion is the policy's, and nothing follows an episode's end
    assert torch.equal(r.completion_mask, real & ~env)
    ends = real.sum(1)
    for row, end in enumerate(ends.tolist()):
        assert bool(real[row, :end].all()) and not bool(real[row, end:].any())
    # each episode's reward is its actions' summed length (Chatty's rule)
    assert [e.reward for e in out.results] == [float(sum(map(len, e.transcript[1::2]))) for e in out.results]


def test_episodes_repeat_exactly_for_the_same_keys():
    a, b = episodes(builtin_policy()), episodes(builtin_policy())
    assert torch.equal(a.rollout.input_ids, b.rollout.input_ids)
    assert [e.transcript for e in a.results] == [e.transcript for e in b.results]


def test_sampler_logprobs_equal_the_training_forward_builtin():
    policy = builtin_policy()
    r = episodes(policy).rollout
    with torch.no_grad():
        logp, entropy = completion_logprobs(policy.module.eval(), r, 1.0)
    mask = r.completion_mask
    torch.testing.assert_close(logp[mask], r.old_logprobs[mask], rtol=0, atol=1e-5)
    assert bool((logp[~mask] == 0).all()) and bool((entropy[~mask] == 0).all())


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_sampler_logprobs_equal_the_training_forward_hf(arch, tmp_path):
    pytest.importorskip("transformers")
    from trainer.model_config import HFModelConfig
    from trainer.policy.hf import HFPolicy
    from trainer.policy.hf_tiny import write_tiny_model

    path = write_tiny_model(tmp_path / arch, arch, positions=128)
    policy = HFPolicy.load(HFModelConfig(source="hf", path=str(path)))
    vowels = list("aeiou0123456789")
    out = episodes(policy, stop=vowels, budget=50)
    r = out.rollout
    assert int(env_positions(r, policy.tokenizer).sum()) > 0, "no answer was fed: the test shows nothing"
    with torch.no_grad():
        logp, _ = completion_logprobs(policy.module.eval(), r, 1.0)
    mask = r.completion_mask
    torch.testing.assert_close(logp[mask], r.old_logprobs[mask], rtol=0, atol=1e-4)


def test_no_environment_token_is_a_term_of_the_loss_or_the_kl():
    """Whatever the log-probs at the answers' positions, the policy loss and the KL are the same."""
    policy = builtin_policy()
    r = episodes(policy).rollout
    env = env_positions(r, policy.tokenizer)
    assert bool(env.any())
    cfg = GRPOConfig(beta=0.1)
    n = r.num_rows
    logp = torch.randn(r.completion_mask.shape)
    ref = torch.randn(r.completion_mask.shape)

    def losses(logp, ref):
        inputs = PolicyLossInputs(
            logprobs=logp, old_logprobs=r.old_logprobs, sampler_logprobs=r.old_logprobs,
            advantages=torch.linspace(-1, 1, n), mask=r.completion_mask, ref_logprobs=ref,
        )  # fmt: skip
        terms = get_policy_loss("vanilla")(inputs, cfg)
        weight = torch.ones(n)
        denominator = r.completion_mask.sum().float()
        return (
            aggregate_loss(terms.pg, r.completion_mask, weight, cfg.loss_agg, denominator),
            aggregate_loss(terms.kl, r.completion_mask, weight, cfg.loss_agg, denominator),
        )

    before = losses(logp, ref)
    after = losses(logp.masked_fill(env, 50.0), ref.masked_fill(env, -50.0))
    torch.testing.assert_close(before, after, rtol=0, atol=0)


def test_hf_observations_come_through_the_chat_template(tmp_path):
    pytest.importorskip("transformers")
    from trainer.model_config import HFModelConfig
    from trainer.policy.base import PromptFormat
    from trainer.policy.hf import HFPolicy
    from trainer.policy.hf_tiny import write_tiny_model
    from trainer.sft import encode_turns

    path = write_tiny_model(tmp_path / "llama", "llama", positions=256)
    policy = HFPolicy.load(HFModelConfig(source="hf", path=str(path)), PromptFormat(chat_template=True))
    tok = policy.tokenizer
    # the tiny template: "<role>: <content>\n" per message, "assistant: " to open the reply
    assert tok.decode(tok.encode_observation("ok;")) == "\nuser: ok;\nassistant: "
    out = episodes(policy, stop=list("aeiou0123456789"), budget=80)
    texts = [tok.decode(row, stop_at_eos=False) for row in out.rollout.completion_ids.tolist()]
    answered = [t for t, e in zip(texts, out.results, strict=True) if e.turns > 1]
    assert answered and all("\nuser: ok;\nassistant: " in t for t in answered)
    r = out.rollout
    with torch.no_grad():
        logp, _ = completion_logprobs(policy.module.eval(), r, 1.0)
    torch.testing.assert_close(logp[r.completion_mask], r.old_logprobs[r.completion_mask], rtol=0, atol=1e-4)
    # the warm start lays a demonstration out the same way, its answers out of the loss
    ids, mask = encode_turns(tok, "q:", [("ab", "ok;"), ("c", "")])
    assert tok.decode(ids).endswith("ab\nuser: ok;\nassistant: c")
    assert tok.decode([i for i, m in zip(ids, mask, strict=True) if m]) == "abc"
