import logging

import pytest
import torch

import trainer.compile as compile_helper
import trainer.policy.gpt_decoding as decoding_module
from bench.sampling import MODES, SamplingPlan, measure_size
from trainer.config import SamplingConfig
from trainer.data.chess_games import CHESS_ALPHABET
from trainer.model_config import BuiltinModelConfig
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.policy.gpt import GPT
from trainer.policy.kv_cache import KVCache
from trainer.sampling.logprobs import completion_logprobs
from trainer.sampling.row_noise import row_keys
from trainer.sampling.sampler import completions_text, decode_step, generate, left_pad, sample_tokens

tok = CharTokenizer(CHESS_ALPHABET)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
PROMPTS = ["e4 e5 Nf3 Nc6 Bb5", "d4", "c4 e5 Nc3", "Nf3 d5 g3 Nf6 Bg2 e6 O-O"]


def tiny(eos_boost: float = 0.0, seed: int = 0) -> GPT:
    """Random-init tiny model; eos_boost > 0 makes EOS likely, so rows stop at different steps."""
    torch.manual_seed(seed)
    model = GPT(BuiltinModelConfig(size="tiny", block_size=96), tok.vocab_size)
    if eos_boost:
        with torch.no_grad():
            w = model.transformer.wte.weight[tok.eos_id]
            model.transformer.ln_f.bias.copy_(w * eos_boost / w.norm() ** 2)
    return model


def prompts(n: int = len(PROMPTS)) -> list[list[int]]:
    return [tok.encode_prompt(p) for p in PROMPTS[:n]]


def cfg(**kw) -> SamplingConfig:
    return SamplingConfig(**{"group_size": 3, "max_new_tokens": 24, **kw})


def test_greedy_kv_cache_equals_full_recomputation():
    model = tiny(eos_boost=2.0)
    with_cache = generate(model, prompts(), cfg(), tok, greedy=True)
    without = generate(model, prompts(), cfg(use_kv_cache=False), tok, greedy=True)
    assert torch.equal(with_cache.input_ids, without.input_ids)
    assert torch.equal(with_cache.completion_mask, without.completion_mask)
    torch.testing.assert_close(with_cache.old_logprobs, without.old_logprobs, rtol=0, atol=1e-5)


@pytest.mark.parametrize(("temperature", "top_k"), [(1.0, None), (0.7, 5)])
def test_old_logprobs_equal_recomputed_logprobs(temperature, top_k):
    model = tiny(eos_boost=2.5)
    gen = torch.Generator().manual_seed(3)
    r = generate(model, prompts(), cfg(temperature=temperature, top_k=top_k), tok, gen)
    assert r.completion_mask.any(1).all() and not r.completion_mask.all()  # some rows stopped early
    with torch.no_grad():
        logp, entropy = completion_logprobs(model, r, temperature)
    torch.testing.assert_close(logp, r.old_logprobs, rtol=0, atol=1e-5)
    assert (entropy[r.completion_mask] > 0).all()


def test_rollout_layout_shapes_and_masks():
    model = tiny(eos_boost=2.5)
    ps = prompts()
    r = generate(model, ps, cfg(), tok, torch.Generator().manual_seed(0))
    n, k, p = len(ps) * 3, 3, max(map(len, ps))
    steps = r.completion_mask.shape[1]
    assert r.prompt_len == p and r.group_size == k and r.num_rows == n
    assert r.input_ids.shape == r.attn_mask.shape == r.position_ids.shape == (n, p + steps)
    assert r.old_logprobs.dtype == torch.float32 and r.input_ids.dtype == torch.long
    for row in range(n):
        prompt = ps[row // k]  # group after group
        assert r.input_ids[row, p - len(prompt) : p].tolist() == prompt
        assert not r.attn_mask[row, : p - len(prompt)].any()
        comp, mask = r.completion_ids[row], r.completion_mask[row]
        eos = (comp == tok.eos_id).nonzero()
        last = int(eos[0]) if len(eos) else steps - 1
        assert mask.tolist() == [True] * (last + 1) + [False] * (steps - last - 1)
        assert (comp[~mask] == tok.pad_id).all() and (r.old_logprobs[row][~mask] == 0).all()
        assert (r.old_logprobs[row][mask] < 0).all()
        real = int(r.attn_mask[row].sum())
        assert r.position_ids[row][r.attn_mask[row]].tolist() == list(range(real))
    texts = completions_text(r, tok)
    assert texts == [tok.decode(row) for row in r.completion_ids.tolist()]


def test_stops_early_when_every_row_has_ended():
    model = tiny(eos_boost=12.0)  # EOS nearly certain at once
    r = generate(model, prompts(), cfg(max_new_tokens=40), tok, torch.Generator().manual_seed(0))
    assert r.completion_mask.shape[1] < 40
    assert (r.completion_ids == tok.eos_id).any(1).all()


def test_stop_at_eos_false_runs_every_step():
    model = tiny(eos_boost=12.0)
    r = generate(model, prompts(2), cfg(), tok, torch.Generator().manual_seed(0), stop_at_eos=False)
    assert r.completion_mask.shape == (6, 24) and r.completion_mask.all()
    with torch.no_grad():
        logp, _ = completion_logprobs(model, r, 1.0)
    torch.testing.assert_close(logp, r.old_logprobs, rtol=0, atol=1e-5)


def test_greedy_rows_of_a_group_are_identical_and_top1_is_greedy():
    model = tiny()
    greedy = generate(model, prompts(), cfg(), tok, greedy=True)
    groups = greedy.input_ids.view(len(PROMPTS), 3, -1)
    assert (groups == groups[:, :1]).all()
    top1 = generate(model, prompts(), cfg(top_k=1), tok, torch.Generator().manual_seed(5))
    assert torch.equal(top1.input_ids, greedy.input_ids)


def test_generator_makes_sampling_reproducible():
    model = tiny()
    a = generate(model, prompts(), cfg(), tok, torch.Generator().manual_seed(7))
    b = generate(model, prompts(), cfg(), tok, torch.Generator().manual_seed(7))
    c = generate(model, prompts(), cfg(), tok, torch.Generator().manual_seed(8))
    assert torch.equal(a.input_ids, b.input_ids)
    assert not torch.equal(a.input_ids, c.input_ids)


@pytest.mark.parametrize("noise", ["generator", "row_keys"])
def test_per_row_prefill_samples_what_shared_prefill_samples(noise):
    """sampling.prefill=per_row (the ablation) and shared give the same rollout for the same seed.

    The rows decode the same prompt cache either way; only the prefill's batch differs (B*K rows
    instead of B), and a matmul kernel may round a row differently with another batch size (on CPU
    here it does not), so tokens must match and log-probs agree to 1e-6.
    """
    model = tiny(eos_boost=1.5)
    ps = prompts()
    out = {}
    for prefill in ("shared", "per_row"):
        c = cfg(prefill=prefill, group_size=4, max_new_tokens=32)
        if noise == "generator":
            out[prefill] = generate(model, ps, c, tok, torch.Generator().manual_seed(11))
        else:
            keys = row_keys(11, 0, 0, len(ps), 4, torch.device("cpu"))
            out[prefill] = generate(model, ps, c, tok, row_keys=keys)
    shared, per_row = out["shared"], out["per_row"]
    assert shared.completion_mask.any(1).all() and not shared.completion_mask.all()  # some rows stopped early
    assert len({tuple(r) for r in shared.completion_ids.tolist()}) > len(ps)  # rows of a group differ
    assert torch.equal(per_row.input_ids, shared.input_ids)
    assert torch.equal(per_row.completion_mask, shared.completion_mask)
    assert torch.equal(per_row.position_ids, shared.position_ids)
    assert (per_row.prompt_len, per_row.group_size) == (shared.prompt_len, shared.group_size)
    torch.testing.assert_close(per_row.old_logprobs, shared.old_logprobs, rtol=0, atol=1e-6)


def test_sample_tokens_top_k_stays_in_top_k_and_reports_full_logprob():
    logits = torch.randn(2000, 20)
    tokens, logp = sample_tokens(logits, 0.5, 3, False, torch.Generator().manual_seed(0))
    top3 = logits.topk(3, dim=-1).indices
    assert (top3 == tokens.unsqueeze(1)).any(1).all()
    expected = torch.log_softmax(logits / 0.5, -1).gather(1, tokens.unsqueeze(1)).squeeze(1)
    torch.testing.assert_close(logp, expected)


def test_left_pad():
    ids, mask = left_pad([[5, 6, 7], [9]], 0, torch.device("cpu"))
    assert ids.tolist() == [[5, 6, 7], [0, 0, 9]]
    assert mask.tolist() == [[True, True, True], [False, False, True]]


def test_model_mode_is_restored_and_no_grad_is_kept():
    model = tiny().train()
    r = generate(model, prompts(1), cfg(), tok, torch.Generator().manual_seed(0))
    assert model.training
    assert not r.old_logprobs.requires_grad
    logp, _ = completion_logprobs(model, r, 1.0)  # rollout tensors feed an autograd forward
    logp.sum().backward()


@pytest.mark.parametrize(
    ("prompt_list", "kw", "match"),
    [
        ([], {}, "at least one prompt"),
        (["e4 e5"], {}, "token id lists"),
        ([[tok.bos_id], []], {}, "non-empty"),
        ([[tok.bos_id] * 90], {}, "exceeds model.block_size"),
        ([[tok.bos_id, 99]], {}, "token ids must lie"),
    ],
)
def test_bad_input_is_a_clear_error(prompt_list, kw, match):
    with pytest.raises(ValueError, match=match):
        generate(tiny(), prompt_list, cfg(**kw), tok)


def test_vocab_mismatch_is_a_clear_error():
    model = GPT(BuiltinModelConfig(size="tiny", block_size=96), tok.vocab_size + 1)
    with pytest.raises(ValueError, match="vocab_size"):
        generate(model, prompts(1), cfg(), tok)


def _no_cxx(monkeypatch):
    """A machine without a C++ compiler: inductor's CPU backend cannot build, so no compile."""
    monkeypatch.setattr(compile_helper.shutil, "which", lambda name: None)
    monkeypatch.setattr(compile_helper, "_warned", set())
    decoding_module._decode_step_fn.cache_clear()


def test_compile_request_without_a_compiler_falls_back_with_one_warning(caplog, monkeypatch):
    _no_cxx(monkeypatch)
    model = tiny()
    eager = generate(model, prompts(), cfg(), tok, greedy=True)
    with caplog.at_level(logging.WARNING, logger="trainer.compile"):
        for _ in range(2):
            compiled = generate(model, prompts(), cfg(compile=True, cuda_graphs=True), tok, greedy=True)
    decoding_module._decode_step_fn.cache_clear()
    assert torch.equal(compiled.input_ids, eager.input_ids)
    warnings = [r.getMessage() for r in caplog.records if "decode step" in r.getMessage()]
    assert len(warnings) == 1 and "no C++ compiler" in warnings[0] and "running eagerly" in warnings[0]


def test_maybe_compile_without_support_returns_eager_function_and_warns_once(caplog, monkeypatch):
    _no_cxx(monkeypatch)

    def fn(x):
        return x + 1

    with caplog.at_level(logging.WARNING, logger="trainer.compile"):
        got = [compile_helper.maybe_compile(fn, device="cpu", enabled=True, what="fn") for _ in range(3)]
    assert all(g is fn for g in got)
    assert [r.getMessage() for r in caplog.records] == [
        "torch.compile requested for fn but no C++ compiler (g++ or c++) for inductor's CPU backend: running eagerly"
    ]
    assert compile_helper.maybe_compile(fn, device="cuda", enabled=False, what="fn") is fn


@pytest.mark.slow
def test_cpu_compiled_decode_samples_what_eager_samples():
    """inductor's C++ backend on CPU: the compiled decode step gives the eager tokens and log-probs."""
    if compile_helper.compile_unsupported_reason("cpu") is not None:
        pytest.skip(compile_helper.compile_unsupported_reason("cpu"))
    model = tiny(eos_boost=2.0)
    eager = generate(model, prompts(), cfg(), tok, greedy=True)
    compiled = generate(model, prompts(), cfg(compile=True), tok, greedy=True)
    assert torch.equal(compiled.input_ids, eager.input_ids)
    torch.testing.assert_close(compiled.old_logprobs, eager.old_logprobs, rtol=0, atol=1e-4)


def test_decode_step_compiles_as_one_graph():
    """fullgraph=True fails on any graph break: the step is fit for CUDA graphs."""
    model = tiny().eval()
    step = torch.compile(decode_step, fullgraph=True, backend="aot_eager", dynamic=False)
    caches = [KVCache.for_model(model.config, 4, 16, device="cpu", dtype=torch.float32) for _ in range(2)]
    tokens = torch.randint(4, tok.vocab_size, (4,))
    positions = torch.zeros(4, dtype=torch.long)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(
                step(model, tokens, positions, caches[0]), decode_step(model, tokens, positions, caches[1])
            )
            positions += 1
    assert int(caches[0].pos) == int(caches[1].pos) == 3


def test_measure_size_reports_every_mode():
    plan = SamplingPlan(num_prompts=2, group_size=2, max_new_tokens=6, repeats=1, warmup=0)
    res = measure_size("tiny", plan)
    assert res["tokens_per_call"] == 24
    for mode in MODES:
        assert res["tokens_per_s"][mode] > 0 and len(res["times_s"][mode]) == 1
    with pytest.raises(ValueError, match="repeats"):
        measure_size("tiny", SamplingPlan(repeats=0))


@pytest.mark.gpu
@cuda
def test_cuda_graphs_decode_matches_eager_and_bf16_logprobs_are_close():
    model = tiny(eos_boost=2.0).cuda()
    eager = generate(model, prompts(), cfg(), tok, greedy=True)  # fp32: no near-ties flip argmax
    graphs = generate(model, prompts(), cfg(compile=True, cuda_graphs=True), tok, greedy=True)
    assert torch.equal(graphs.input_ids, eager.input_ids)
    torch.testing.assert_close(graphs.old_logprobs, eager.old_logprobs, rtol=0, atol=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(0)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        sampled = generate(model, prompts(), cfg(compile=True, cuda_graphs=True), tok, gen)
        with torch.no_grad():
            logp, _ = completion_logprobs(model, sampled, 1.0)
    gap = (logp - sampled.old_logprobs).abs()[sampled.completion_mask]
    assert gap.mean() < 0.05  # bf16 cached decode vs bf16 full forward: same tokens, close log-probs
