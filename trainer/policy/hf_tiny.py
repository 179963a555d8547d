"""A tiny randomly initialised `transformers` model and a character tokenizer, for tests and smoke runs.

The tokenizer has one token per printable ASCII character (and newline), which covers the bundled
tasks' text (SAN moves, FEN, arithmetic), plus <pad>, <bos>, <sep>, <eos> and <unk>. A prompt is
encoded as `<bos> prompt <sep>` (its post-processor adds both), the way the built-in GPT marks where
a completion starts; it also has a small chat template. Nothing is downloaded.
"""

from __future__ import annotations

import string
from pathlib import Path

import torch

SPECIALS = ("<pad>", "<bos>", "<sep>", "<eos>", "<unk>")
CHARS = "".join(sorted(set(string.printable) - set("\t\r\x0b\x0c")))
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def char_tokenizer():
    """A PreTrainedTokenizerFast with one token per character of CHARS."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate([*SPECIALS, *CHARS])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A <sep>", special_tokens=[("<bos>", vocab["<bos>"]), ("<sep>", vocab["<sep>"])]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
        unk_token="<unk>", additional_special_tokens=["<sep>"],
    )  # fmt: skip
    tok.chat_template = CHAT_TEMPLATE
    return tok


def model_config(arch: str, tok, width: int = 128, layers: int = 2, heads: int = 4, positions: int = 256):
    """A transformers config of the tiny shape (the built-in `tiny` GPT's: 2 layers, 128 wide)."""
    from transformers import GPT2Config, LlamaConfig

    ids = {
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }
    if arch == "gpt2":
        return GPT2Config(
            vocab_size=len(tok), n_positions=positions, n_embd=width, n_layer=layers, n_head=heads, **ids
        )
    if arch == "llama":
        return LlamaConfig(
            vocab_size=len(tok), hidden_size=width, intermediate_size=2 * width, num_hidden_layers=layers,
            num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=positions,
            tie_word_embeddings=True, **ids,
        )  # fmt: skip
    raise ValueError(f"--arch: {arch!r} is not allowed; expected 'llama' or 'gpt2'")


def write_tiny_model(out_dir: str | Path, arch: str = "llama", seed: int = 0, **shape) -> Path:
    """Write a random `arch` model and the character tokenizer to `out_dir`; returns it."""
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tok = char_tokenizer()
    config = model_config(arch, tok, **shape)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
