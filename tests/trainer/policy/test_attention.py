"""Explicit-matmul attention against torch's fused kernel, and the `auto` rule that picks one."""

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from trainer.config import SamplingConfig, TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET
from trainer.engine import Trainer
from trainer.model_config import BuiltinModelConfig
from trainer.policy.attention import attention_mask, eager_attention, mask_input, resolve_attention
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.policy.gpt import GPT
from trainer.sampling.sampler import generate

TOKENIZER = CharTokenizer(CHESS_ALPHABET)


def _qkv(b: int, t: int, tk: int, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(b, 4, n, 16, generator=g).to(dtype) for n in (t, tk, tk)]


def test_eager_attention_equals_the_fused_kernel_with_a_padding_mask():
    q, k, v = _qkv(3, 7, 7)
    valid = torch.ones(3, 7, dtype=torch.bool)
    valid[0, :3] = False  # a left-padded row
    cols = torch.arange(7)
    mask = attention_mask(valid, cols, cols)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(eager_attention(q, k, v, mask, 0.0), expected, rtol=0, atol=1e-6)
    bias = mask_input("eager", mask)  # what the GPT's blocks get: made once per forward
    assert bias.dtype == torch.float32 and mask_input("sdpa", mask) is mask
    torch.testing.assert_close(eager_attention(q, k, v, bias, 0.0), expected, rtol=0, atol=1e-6)
    half = eager_attention(*(x.bfloat16() for x in (q, k, v)), bias, 0.0)
    assert half.dtype == torch.bfloat16 and (half.float() - expected).abs().max() < 3e-2


def test_eager_attention_is_causal_without_a_mask_also_for_queries_after_cached_keys():
    q, k, v = _qkv(2, 7, 7)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(eager_attention(q, k, v, None, 0.0), expected, rtol=0, atol=1e-6)
    # the last 2 queries over all 7 keys: query i sees keys 0..5+i
    tail = eager_attention(q[:, :, -2:], k, v, None, 0.0)
    torch.testing.assert_close(tail, expected[:, :, -2:], rtol=0, atol=1e-6)


def test_eager_attention_takes_its_softmax_in_float32_under_bf16():
    q, k, v = _qkv(2, 5, 5, torch.bfloat16)
    out = eager_attention(q, k, v, None, 0.0)
    assert out.dtype == torch.bfloat16
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    assert (out.double() - exact).abs().max() < 2e-2  # bf16 rounding of the inputs and output only


def test_the_gpt_gives_the_same_logits_and_samples_with_either_attention():
    torch.manual_seed(0)
    model = GPT(BuiltinModelConfig(size="tiny", block_size=64), TOKENIZER.vocab_size).eval()
    ids = torch.randint(4, TOKENIZER.vocab_size, (3, 9))
    valid = torch.ones(3, 9, dtype=torch.bool)
    valid[1, :4] = False
    fused = model(ids, attn_mask=valid)
    model.set_attention("eager")
    torch.testing.assert_close(model(ids, attn_mask=valid), fused, rtol=0, atol=1e-5)
    prompts = [TOKENIZER.encode_prompt(p) for p in ("e4 e5", "d4")]
    cfg = SamplingConfig(group_size=2, max_new_tokens=12)
    eager = generate(model, prompts, cfg, TOKENIZER, greedy=True, stop_at_eos=False)
    model.set_attention("sdpa")
    sdpa = generate(model, prompts, cfg, TOKENIZER, greedy=True, stop_at_eos=False)
    assert torch.equal(eager.input_ids, sdpa.input_ids)
    torch.testing.assert_close(eager.old_logprobs, sdpa.old_logprobs, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="'sdpa' or 'eager'"):
        model.set_attention("flash")


def test_auto_takes_eager_only_for_low_precision_on_a_cpu():
    assert resolve_attention("auto", "cpu", "bf16")[0] == "eager"
    assert resolve_attention("auto", "cpu", "fp16")[0] == "eager"
    assert resolve_attention("auto", "cpu", "fp32")[0] == "sdpa"
    # the built-in GPT in fp32: eager up to EAGER_MAX_POSITIONS, whose scores stay small
    assert resolve_attention("auto", "cpu", "fp32", builtin_positions=256)[0] == "eager"
    assert resolve_attention("auto", "cpu", "fp32", builtin_positions=512)[0] == "sdpa"
    assert resolve_attention("auto", "cuda", "fp32", builtin_positions=128)[0] == "sdpa"
    assert resolve_attention("auto", "cuda", "bf16")[0] == "sdpa"
    assert resolve_attention("eager", "cuda", "bf16") == ("eager", "set in the config")
    with pytest.raises(ValueError, match="attn_implementation"):
        resolve_attention("flash", "cpu", "fp32")


def test_the_trainer_gives_the_policy_the_resolved_attention_and_records_why():
    def trainer(**precision_and_model):
        return Trainer(TrainerConfig.model_validate(precision_and_model), TOKENIZER)

    low = trainer(precision={"dtype": "bf16"})
    assert low.attention["attention"] == "eager" and "bf16 on a CPU" in low.attention["attention_reason"]
    assert all(b.attn.implementation == "eager" for b in low.model.transformer.h)
    short = trainer(precision={"dtype": "fp32"})  # block_size 256
    assert short.attention["attention"] == "eager" and "at most 256" in short.attention["attention_reason"]
    full = trainer(precision={"dtype": "fp32"}, model={"block_size": 512})
    assert full.attention["attention"] == "sdpa"
    assert all(b.attn.implementation == "sdpa" for b in full.model.transformer.h)
    chosen = trainer(precision={"dtype": "fp32"}, model={"attn_implementation": "sdpa"})
    assert chosen.attention == {"attention": "sdpa", "attention_reason": "set in the config"}


def test_flash_attention_is_refused_for_the_builtin_gpt():
    with pytest.raises(ValidationError, match="flash_attention_2 is for model.source=hf"):
        BuiltinModelConfig(attn_implementation="flash_attention_2")
