import math

import pytest
import torch

from trainer.config import SamplingConfig
from trainer.data.chess_games import CHESS_ALPHABET
from trainer.model_config import BuiltinModelConfig
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.policy.gpt import GPT
from trainer.sampling.logprobs import completion_logprobs, token_entropy, token_logprobs
from trainer.sampling.rollout import Rollout
from trainer.sampling.sampler import generate

tok = CharTokenizer(CHESS_ALPHABET)


def tiny() -> GPT:
    torch.manual_seed(0)
    return GPT(BuiltinModelConfig(size="tiny", block_size=64), tok.vocab_size)


def test_token_logprobs_matches_log_softmax_and_is_float32():
    logits = torch.randn(3, 5, 11)
    targets = torch.randint(0, 11, (3, 5))
    expected = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(token_logprobs(logits, targets), expected)
    assert token_logprobs(logits.bfloat16(), targets).dtype == torch.float32


def test_entropy_bounds():
    assert torch.allclose(token_entropy(torch.zeros(2, 3, 8)), torch.full((2, 3), math.log(8)))
    peaked = torch.full((1, 1, 8), -1e4)
    peaked[..., 2] = 0.0
    assert token_entropy(peaked).abs().max() < 1e-6


def _rollout(model: GPT) -> Rollout:
    prompts = [tok.encode_prompt(p) for p in ("e4 e5 Nf3", "d4", "c4 c5 Nc3 Nc6")]
    cfg = SamplingConfig(group_size=2, max_new_tokens=10)
    return generate(model, prompts, cfg, tok, torch.Generator().manual_seed(1), stop_at_eos=False)


def test_completion_logprobs_equal_per_row_unpadded_scoring():
    """Left padding and batching change nothing: each row scored alone gives the same values."""
    model = tiny().eval()
    r = _rollout(model)
    with torch.no_grad():
        logp, entropy = completion_logprobs(model, r, 0.8)
        assert logp.shape == entropy.shape == r.completion_mask.shape
        assert logp.dtype == entropy.dtype == torch.float32
        for row in range(r.num_rows):
            real = r.input_ids[row][r.attn_mask[row]].unsqueeze(0)  # [1, T_real]
            logits = model(real)[:, :-1].float() / 0.8
            n_prompt = int(r.attn_mask[row, : r.prompt_len].sum())
            alone = token_logprobs(logits, real[:, 1:])[0, n_prompt - 1 :]
            torch.testing.assert_close(logp[row], alone, rtol=0, atol=1e-5)
            torch.testing.assert_close(
                entropy[row], token_entropy(logits)[0, n_prompt - 1 :], rtol=0, atol=1e-5
            )


def test_masked_positions_are_zero_and_gradients_flow():
    model = tiny().train()
    r = _rollout(model)
    mask = r.completion_mask.clone()
    mask[:, 6:] = False
    r = r._replace(completion_mask=mask)
    logp, entropy = completion_logprobs(model, r, 1.0)
    assert (logp[:, 6:] == 0).all() and (entropy[:, 6:] == 0).all()
    assert (logp[:, :6] < 0).all()
    logp.sum().backward()
    assert model.transformer.wte.weight.grad.abs().sum() > 0


def test_bad_arguments():
    model = tiny()
    r = _rollout(model)
    with pytest.raises(ValueError, match="temperature"):
        completion_logprobs(model, r, 0.0)
    with pytest.raises(ValueError, match="completion token"):
        completion_logprobs(model, r._replace(input_ids=r.input_ids[:, : r.prompt_len]), 1.0)


def test_logits_to_keep_gives_the_last_positions_of_the_full_forward():
    model = tiny().eval()
    r = _rollout(model)
    with torch.no_grad():
        full = model(r.input_ids, r.position_ids, r.attn_mask)
        last = model(r.input_ids, r.position_ids, r.attn_mask, logits_to_keep=4)
    assert last.shape == (r.num_rows, 4, tok.vocab_size)
    torch.testing.assert_close(last, full[:, -4:], rtol=0, atol=1e-6)


def test_logprobs_under_bf16_autocast_come_from_float32_logits():
    """The lm-head runs in float32 under autocast: the log-probs equal a float64 head on the same
    hidden states, where bf16-rounded logits are off by about 0.01-0.06 nats."""
    model = tiny().eval()
    r = _rollout(model)
    seen = []
    hook = model.transformer.ln_f.register_forward_hook(lambda m, i, out: seen.append(out))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(r.input_ids, r.position_ids, r.attn_mask)
        logp, _ = completion_logprobs(model, r, 0.8)
    hook.remove()
    assert logits.dtype == torch.float32
    hidden, weight, keep = seen[-1], model.lm_head.weight, r.completion_mask
    targets = r.input_ids[:, r.prompt_len :]

    def head_logp(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out = token_logprobs((h @ w.T).double() / 0.8, targets).float()
        return out.masked_fill(~keep, 0.0)

    exact = head_logp(hidden.double(), weight.double())
    rounded = head_logp(hidden.bfloat16(), weight.bfloat16())
    assert (logp - exact).abs().max() < 1e-5
    assert (rounded - exact).abs().max() > 1e-3  # what a bf16 lm-head would cost
