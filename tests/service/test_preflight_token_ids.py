"""The sample items a reward is tried on before a run carry token ids when a reward takes them."""

from types import SimpleNamespace

import pytest

from rewards.styles import TOKEN_IDS
from service.preflight.reward_trial import sample_items
from service.preflight.token_ids import completion_encoder
from trainer.data.pairs import FieldPair
from trainer.policy.char_tokenizer import CharTokenizer


def test_each_sample_completion_gets_the_ids_the_sampler_would_give_it():
    task = SimpleNamespace(alphabet="abc=")
    cfg = SimpleNamespace(model=SimpleNamespace(source="builtin"))
    encode = completion_encoder(cfg, task)
    tok = CharTokenizer("abc=")
    pairs = [FieldPair("ab=", "ba", {"x": 1})]
    items = sample_items(pairs, 4, encode)
    assert [i.completion for i in items] == ["ba", "b", "", "ab="]
    assert [i.fields[TOKEN_IDS] for i in items] == [[*tok.encode(i.completion), tok.eos_id] for i in items]
    assert all(i.fields["x"] == 1 for i in items) and pairs[0].fields == {"x": 1}
    assert encode("z") is None  # outside the alphabet: the item goes without ids, and its reward says so
    assert sample_items(pairs, 1)[0].fields == {"x": 1}  # no encoder: the row as it is


def test_an_hf_run_encodes_the_sample_completions_with_its_own_tokenizer(tmp_path):
    pytest.importorskip("transformers")
    from service.config import load_config, prompt_format
    from trainer.policy.hf import load_tokenizer
    from trainer.policy.hf_tiny import write_tiny_model
    from trainer.policy.hf_tokenizer import HFTokenizer

    path = write_tiny_model(tmp_path / "tiny", "gpt2", positions=96)
    cfg = load_config("hf-smoke", overrides=[f"model.path={path}"])
    ids = completion_encoder(cfg, task=None)("e4 e5")
    tok = HFTokenizer(load_tokenizer(cfg.model), prompt_format(cfg))
    assert ids[-1] == tok.eos_id and tok.decode(ids) == "e4 e5"
