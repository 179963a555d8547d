import pytest
import torch

from trainer.data.chess_games import CHESS_ALPHABET
from trainer.model_config import BuiltinModelConfig
from trainer.policy.attention import positions_from_mask
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.policy.gpt import GPT
from trainer.policy.kv_cache import KVCache

TOKENIZER = CharTokenizer(CHESS_ALPHABET)

V = TOKENIZER.vocab_size
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def tiny(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(BuiltinModelConfig(size="tiny", block_size=64, **kw), V).eval()


def per_layer(c: int) -> int:
    """ln_1 + qkv + attn proj + ln_2 + MLP up + MLP down, with biases."""
    return 2 * c + (3 * c * c + 3 * c) + (c * c + c) + 2 * c + (4 * c * c + 4 * c) + (4 * c * c + c)


@pytest.mark.parametrize(
    ("size", "non_embedding"), [("tiny", 396_800), ("small", 3_159_552), ("gpt2", 85_056_000)]
)
def test_parameter_counts(size, non_embedding):
    with torch.device("meta"):
        model = GPT(BuiltinModelConfig(size=size, block_size=256), V)
    c, n_layer = model.config.n_embd, model.config.n_layer
    assert model.num_params(non_embedding=True) == n_layer * per_layer(c) + 2 * c == non_embedding
    # Tied head: the token embedding is counted once.
    assert model.num_params(non_embedding=False) == non_embedding + V * c + 256 * c


def test_lm_head_is_tied_to_token_embedding():
    model = tiny()
    assert model.lm_head.weight is model.transformer.wte.weight


def test_flops_per_token_formula():
    model = tiny()
    c = model.config
    n = model.num_params() + V * c.n_embd
    assert model.estimate_flops_per_token(32) == 6 * n + 12 * c.n_layer * c.n_embd * 32
    assert model.estimate_flops_per_token() == model.estimate_flops_per_token(c.block_size)


def test_forward_shape_dtype_and_causality():
    model = tiny()
    idx = torch.randint(4, V, (3, 10))
    logits = model(idx)
    assert logits.shape == (3, 10, V) and logits.dtype == torch.float32
    changed = idx.clone()
    changed[:, 6:] = (changed[:, 6:] + 1 - 4) % (V - 4) + 4
    torch.testing.assert_close(model(changed)[:, :6], logits[:, :6], rtol=0, atol=1e-6)
    assert not torch.allclose(model(changed)[:, 6:], logits[:, 6:])


def test_all_true_mask_equals_causal_fast_path():
    model = tiny()
    idx = torch.randint(4, V, (2, 12))
    mask = torch.ones_like(idx, dtype=torch.bool)
    torch.testing.assert_close(model(idx, attn_mask=mask), model(idx), rtol=0, atol=1e-5)


def test_left_padding_is_invisible():
    """A left-padded row gives the same logits at its real positions as the row alone."""
    model = tiny()
    rows = [torch.randint(4, V, (n,)) for n in (9, 4, 6)]
    width = 9
    idx = torch.zeros(3, width, dtype=torch.long)
    mask = torch.zeros(3, width, dtype=torch.bool)
    for i, r in enumerate(rows):
        idx[i, width - len(r) :] = r
        mask[i, width - len(r) :] = True
    logits = model(idx, attn_mask=mask)
    assert torch.isfinite(logits).all()
    for i, r in enumerate(rows):
        alone = model(r.unsqueeze(0))[0]
        torch.testing.assert_close(logits[i, width - len(r) :], alone, rtol=0, atol=1e-5)


def test_positions_count_real_tokens_only():
    mask = torch.tensor([[False, False, True, True, True], [True, True, True, False, True]])
    assert positions_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 2, 3]]


def test_kv_cache_matches_full_forward_with_left_padding():
    model = tiny()
    idx = torch.randint(4, V, (2, 14))
    mask = torch.ones_like(idx, dtype=torch.bool)
    mask[0, :3] = False  # row 0 has three left pads in the prompt part
    pos = positions_from_mask(mask)
    full = model(idx, pos, mask)
    prompt = 8
    cache = KVCache.for_model(model.config, 2, 14, device="cpu", dtype=torch.float32)
    steps = [model(idx[:, :prompt], pos[:, :prompt], mask[:, :prompt], kv_cache=cache)]
    for t in range(prompt, 14):
        steps.append(model(idx[:, t : t + 1], pos[:, t : t + 1], kv_cache=cache))
    assert int(cache.pos) == 14
    incremental = torch.cat(steps, dim=1)
    torch.testing.assert_close(incremental[mask], full[mask], rtol=0, atol=1e-5)


@pytest.mark.parametrize("static", [False, True])
def test_kv_cache_reads_only_written_columns_unless_static(static):
    """An eager cache attends over the columns written so far, a static one over all of them
    (masked): the logits agree, and the eager cache refuses to overflow."""
    model = tiny()
    idx = torch.randint(4, V, (2, 10))
    mask = torch.ones_like(idx, dtype=torch.bool)
    mask[1, :2] = False
    pos = positions_from_mask(mask)
    full = model(idx, pos, mask)
    cache = KVCache.for_model(model.config, 2, 12, device="cpu", dtype=torch.float32, static=static)
    steps = [model(idx[:, :6], pos[:, :6], mask[:, :6], kv_cache=cache)]
    for t in range(6, 10):
        steps.append(model(idx[:, t : t + 1], pos[:, t : t + 1], kv_cache=cache))
    torch.testing.assert_close(torch.cat(steps, dim=1)[mask], full[mask], rtol=0, atol=1e-5)
    assert int(cache.pos) == 10 and cache.length == (0 if static else 10)
    if not static:
        with pytest.raises(ValueError, match="overflows the cache's 12"):
            model(idx[:, :3], pos[:, :3], mask[:, :3], kv_cache=cache)


def test_kv_cache_load_repeated_and_errors():
    cfg = BuiltinModelConfig(size="tiny", block_size=64)
    prefix = KVCache.for_model(cfg, 2, 5, device="cpu", dtype=torch.float32)
    for t in prefix.k + prefix.v:
        t.normal_()
    prefix.key_valid[:, 2:] = True
    prefix.advance(5)
    big = KVCache.for_model(cfg, 6, 9, device="cpu", dtype=torch.float32)
    big.load_repeated(prefix, 3)
    assert int(big.pos) == 5 and big.length == 5
    for row in range(6):
        torch.testing.assert_close(big.k[1][row, :, :5], prefix.k[1][row // 3], rtol=0, atol=0)
        assert big.key_valid[row].tolist() == [False, False, True, True, True] + [False] * 4
    with pytest.raises(ValueError, match="cannot load"):
        big.load_repeated(prefix, 2)
    with pytest.raises(ValueError, match="sizes must be >= 1"):
        KVCache(2, 0, 4, 8, 32, device="cpu", dtype=torch.float32)


def test_cache_with_mask_needs_position_ids():
    model = tiny()
    cache = KVCache.for_model(model.config, 1, 8, device="cpu", dtype=torch.float32)
    idx = torch.randint(4, V, (1, 4))
    with pytest.raises(ValueError, match="position_ids"):
        model(idx, attn_mask=torch.ones_like(idx, dtype=torch.bool), kv_cache=cache)


def test_too_long_sequence_is_a_clear_error():
    model = tiny()
    with pytest.raises(ValueError, match="exceeds block_size 64"):
        model(torch.zeros(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="vocab_size"):
        GPT(BuiltinModelConfig(), 0)


def test_gradient_checkpointing_gives_same_loss_and_grads():
    idx = torch.randint(4, V, (2, 16))
    mask = torch.ones_like(idx, dtype=torch.bool)
    mask[1, :4] = False
    grads = []
    for ckpt in (False, True):
        model = tiny(gradient_checkpointing=ckpt).train()
        loss = model(idx, attn_mask=mask).float().logsumexp(-1).mean()
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(grads[0][0], grads[1][0])
    for a, b in zip(grads[0][1], grads[1][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_autocast_bf16_on_cpu_gives_fp32_logits_close_to_fp32():
    model = tiny()
    idx = torch.randint(4, V, (2, 10))
    ref = model(idx)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(idx)
    assert low.dtype == torch.float32  # the body runs in bf16, the lm-head in fp32
    assert next(model.parameters()).dtype == torch.float32  # the model itself never changes dtype
    torch.testing.assert_close(low.float(), ref, rtol=0, atol=5e-2)


@pytest.mark.gpu
@cuda
def test_cuda_bf16_cached_forward_matches_full():
    model = tiny().cuda()
    idx = torch.randint(4, V, (4, 20), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        full = model(idx)
        cache = KVCache.for_model(model.config, 4, 20, device="cuda", dtype=torch.bfloat16)
        first = model(idx[:, :10], kv_cache=cache)
        rest = [model(idx[:, t : t + 1], kv_cache=cache) for t in range(10, 20)]
    inc = torch.cat([first, *rest], dim=1)
    torch.testing.assert_close(inc.float(), full.float(), rtol=0, atol=5e-2)
