"""The transformers policy: cached decoding, log-probs and the tokenizer seam (tiny random models)."""

import pytest
import torch

pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM  # noqa: E402

from trainer.config import SamplingConfig  # noqa: E402
from trainer.model_config import HFModelConfig  # noqa: E402
from trainer.policy.base import PromptFormat  # noqa: E402
from trainer.policy.hf import HFPolicy  # noqa: E402
from trainer.policy.hf_tiny import write_tiny_model  # noqa: E402
from trainer.sampling.logprobs import completion_logprobs  # noqa: E402
from trainer.sampling.row_noise import row_keys  # noqa: E402
from trainer.sampling.sampler import generate  # noqa: E402

PROMPTS = ["e4 e5 Nf3 Nc6 Bb5", "d4", "c4 e5 Nc3", "12+30="]


@pytest.fixture(
    scope="module", params=[("llama", "sdpa"), ("gpt2", "sdpa"), ("llama", "eager"), ("gpt2", "eager")]
)
def policy(request, tmp_path_factory) -> HFPolicy:
    """Each architecture with each attention whose decode-step mask the policy builds itself."""
    arch, attention = request.param
    path = write_tiny_model(tmp_path_factory.mktemp(arch), arch, positions=128)
    return HFPolicy.load(HFModelConfig(source="hf", path=str(path), attn_implementation=attention))


def _prompts(policy):
    return [policy.tokenizer.encode_prompt(p) for p in PROMPTS]


def test_cached_decoding_equals_full_recomputation(policy):
    cfg = SamplingConfig(group_size=2, max_new_tokens=16)
    cached = generate(policy, _prompts(policy), cfg, greedy=True, stop_at_eos=False)
    full = generate(
        policy,
        _prompts(policy),
        cfg.model_copy(update={"use_kv_cache": False}),
        greedy=True,
        stop_at_eos=False,
    )
    assert torch.equal(cached.input_ids, full.input_ids)
    torch.testing.assert_close(cached.old_logprobs, full.old_logprobs, rtol=0, atol=1e-5)


def test_logprobs_equal_log_softmax_of_the_model_on_each_unpadded_row(policy):
    """Sampler log-probs and the training forward's both equal the model alone on the row's real tokens."""
    cfg = SamplingConfig(group_size=3, max_new_tokens=12, temperature=1.0)
    r = generate(policy, _prompts(policy), cfg, generator=torch.Generator().manual_seed(0), stop_at_eos=False)
    # the model as transformers itself loads it (the policy's own replaces GPT-2's gelu_new module)
    model = AutoModelForCausalLM.from_pretrained(
        policy.cfg.path, dtype=torch.float32, attn_implementation=policy.cfg.attn_implementation
    ).eval()
    policy.model.eval()  # no dropout in the recomputation below
    p = r.prompt_len
    for row in range(r.num_rows):
        ids = r.input_ids[row][r.attn_mask[row]]  # the prompt's real tokens and the completion
        with torch.no_grad():
            logits = model(input_ids=ids.unsqueeze(0)).logits[0].float()
        n_prompt = int(r.attn_mask[row, :p].sum())
        expected = torch.log_softmax(logits[n_prompt - 1 : -1], -1).gather(-1, ids[n_prompt:, None])[:, 0]
        torch.testing.assert_close(r.old_logprobs[row], expected, rtol=0, atol=1e-5)
    with torch.no_grad():
        recomputed, _ = completion_logprobs(policy.module, r, cfg.temperature)
    torch.testing.assert_close(recomputed, r.old_logprobs, rtol=0, atol=1e-5)


def test_per_row_prefill_samples_what_shared_prefill_samples(policy):
    """sampling.prefill=per_row prefills each row's copy of its prompt; the samples are the same."""
    keys = row_keys(5, 0, 0, len(PROMPTS), 3, torch.device("cpu"))
    out = {
        prefill: generate(
            policy,
            _prompts(policy),
            SamplingConfig(group_size=3, max_new_tokens=12, prefill=prefill),
            row_keys=keys,
        )
        for prefill in ("shared", "per_row")
    }
    assert torch.equal(out["per_row"].input_ids, out["shared"].input_ids)
    assert torch.equal(out["per_row"].completion_mask, out["shared"].completion_mask)
    torch.testing.assert_close(out["per_row"].old_logprobs, out["shared"].old_logprobs, rtol=0, atol=1e-6)


def test_tokenizer_prompt_pair_and_decode(policy):
    tok = policy.tokenizer
    ids, mask = tok.encode_pair("d4", "rnb")
    assert ids[: len(tok.encode_prompt("d4"))] == tok.encode_prompt("d4")
    assert ids[-1] == tok.eos_id and sum(mask) == 4 and tok.pad_id != tok.eos_id
    assert tok.decode(ids[len(tok.encode_prompt("d4")) :]) == "rnb"
    assert policy.width == policy.base_model.get_input_embeddings().weight.shape[1]  # hidden size


def test_chat_template_renders_system_and_user(tmp_path):
    path = write_tiny_model(tmp_path, "llama", positions=64)
    fmt = PromptFormat(chat_template=True, system="be brief")
    tok = HFPolicy.load(HFModelConfig(source="hf", path=str(path)), fmt).tokenizer
    assert tok.decode(tok.encode_prompt("d4")) == "system: be brief\nuser: d4\nassistant: "


def test_cached_decoding_uses_no_deprecated_argument(policy):
    """transformers 5.x renamed `past_key_values` to `cache` and warns on the old name every run."""
    from transformers.testing_utils import CaptureLogger
    from transformers.utils import logging as hf_logging

    logger = hf_logging.get_logger("transformers.utils.generic")
    cfg = SamplingConfig(group_size=2, max_new_tokens=4)
    with CaptureLogger(logger) as captured:
        generate(policy, _prompts(policy), cfg, greedy=True, stop_at_eos=False)
    assert "deprecated" not in captured.out, captured.out


@pytest.mark.parametrize(("dtype", "expected"), [("bf16", "eager"), ("fp32", "sdpa")])
def test_auto_attention_is_set_once_the_runs_precision_is_known(tmp_path, dtype, expected):
    from trainer.config import TrainerConfig
    from trainer.engine import Trainer

    path = write_tiny_model(tmp_path, "gpt2", positions=64)
    cfg = TrainerConfig.model_validate(
        {"model": {"source": "hf", "path": str(path)}, "precision": {"dtype": dtype}}
    )
    assert cfg.model.attn_implementation == "auto"
    trainer = Trainer(cfg)
    assert trainer.policy.base_model.config._attn_implementation == expected
    assert trainer.attention["attention"] == expected
    ids = torch.tensor([trainer.policy.tokenizer.encode_prompt("e4 e5")])
    with torch.no_grad():
        before = trainer.policy.module(ids).float()
        trainer.policy.set_attention("sdpa" if expected == "eager" else "eager")
        after = trainer.policy.module(ids).float()
    torch.testing.assert_close(after, before, rtol=0, atol=1e-5)  # fp32 forward: the same either way
