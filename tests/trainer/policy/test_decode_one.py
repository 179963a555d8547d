"""`GPT.decode_one`, the lean decoding step, gives what the general forward gives with the cache."""

import pytest
import torch

from trainer.config import SamplingConfig
from trainer.model_config import BuiltinModelConfig
from trainer.policy.attention import positions_from_mask
from trainer.policy.gpt import GPT
from trainer.policy.kv_cache import KVCache
from trainer.sampling.row_noise import row_keys
from trainer.sampling.sampler import generate


def _steps(model: GPT, lean: bool, static: bool, dtype: torch.dtype) -> torch.Tensor:
    """Five decoding steps after a left-padded prefill, fed the same tokens either way."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 40, (6, 9), generator=g)
    mask = torch.ones(6, 9, dtype=torch.bool)
    mask[0, :3], mask[4, :1] = False, False
    feed = torch.randint(0, 40, (5, 6), generator=g)
    cache = KVCache.for_model(model.config, 6, 20, device="cpu", dtype=dtype, static=static)
    out = []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        model(ids, positions_from_mask(mask), mask, kv_cache=cache)
        pos = mask.sum(1)
        for tokens in feed:
            if lean:
                out.append(model.decode_one(tokens, pos, cache))
            else:
                out.append(model(tokens[:, None], pos[:, None], kv_cache=cache)[:, -1])
            pos = pos + 1
    return torch.stack(out)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_one_equals_the_cached_forward(attention, static, dtype):
    torch.manual_seed(0)
    model = GPT(BuiltinModelConfig(size="tiny", block_size=64), 40).eval()
    model.set_attention(attention)
    lean, general = _steps(model, True, static, dtype), _steps(model, False, static, dtype)
    assert lean.shape == (5, 6, 40) and lean.dtype == torch.float32
    torch.testing.assert_close(lean, general, rtol=0, atol=1e-5 if dtype == torch.float32 else 0.02)


def test_a_rollout_from_inference_mode_decoding_trains():
    """Decoding runs under inference_mode; the rollout it returns must still feed a backward."""
    torch.manual_seed(0)
    model = GPT(BuiltinModelConfig(size="tiny", block_size=64), 40)
    tokenizer = type("T", (), {"pad_id": 0, "eos_id": 1, "vocab_size": 40})()

    cfg = SamplingConfig(group_size=2, max_new_tokens=4)
    rollout = generate(model, [[5, 6, 7], [8, 9]], cfg, tokenizer, row_keys=row_keys(0, 0, 0, 2, 2, "cpu"))
    assert model.training and not rollout.input_ids.is_inference()
    logits = model(rollout.input_ids, rollout.position_ids, rollout.attn_mask)
    logits.logsumexp(-1).sum().backward()
    assert model.lm_head.weight.grad is not None
