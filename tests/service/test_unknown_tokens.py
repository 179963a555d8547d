"""Data an hf tokenizer cannot carry is refused before the run, in one line, unless allowed."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from transformers import PreTrainedTokenizerFast  # noqa: E402

from service.config import ConfigError  # noqa: E402
from service.preflight.tokens import RunRow, check_unknown_tokens  # noqa: E402

WORDS = ["what", "is", "one", "plus", "two", "three", "?", ","]


def word_tokenizer(lowercase: bool = False) -> PreTrainedTokenizerFast:
    """A word-level tokenizer with an [UNK] token: words split on whitespace and punctuation, decoded
    with a space between tokens (so only whitespace differs on the way back)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[EOS]", *WORDS])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    if lowercase:
        core.normalizer = normalizers.Lowercase()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with no merges and no unknown token (every text encodes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {t: i for i, t in enumerate(["<eos>", *sorted(alphabet)])}
    core = Tokenizer(models.BPE(vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", pad_token="<eos>")


ROWS = [
    RunRow("held-out", 0, "what is one plus two ?", "three"),
    RunRow("training", 0, "what is one plus one ?", "two"),
    RunRow("training", 1, "what is two plus one , 😀 ?", "three"),
    RunRow("training", 2, "what is one plus two ?", "三"),
    RunRow("training", 3, "what  is\tone plus one ?", None),  # whitespace of its own; no target
]


def test_unknown_characters_are_refused_in_one_line_with_count_field_and_first_row():
    with pytest.raises(ConfigError) as refused:
        check_unknown_tokens(word_tokenizer(), ROWS)
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith("model.unknown_tokens: ")
    assert "1 prompt and 1 target" in line
    assert "training row 1, prompt 'what is two plus one , 😀 ?'" in line
    assert "'😀' at character 23 encodes as the unknown token '[UNK]'" in line
    assert "model.unknown_tokens=allow" in line


def test_allow_passes_and_clean_rows_pass():
    check_unknown_tokens(word_tokenizer(), ROWS, "allow")
    check_unknown_tokens(word_tokenizer(), [ROWS[0], ROWS[1], ROWS[4]])  # spacing alone is not a loss
    check_unknown_tokens(word_tokenizer(), [])


def test_a_target_alone_is_named_as_a_target():
    with pytest.raises(ConfigError, match=r"1 target of .* training row 2, target '三'"):
        check_unknown_tokens(word_tokenizer(), ROWS[:2] + ROWS[3:])


def test_text_that_does_not_decode_back_is_refused():
    rows = [
        RunRow("held-out", 0, "what is one plus two ?", "three"),
        RunRow("training", 0, "What is one ?", "one"),
    ]
    with pytest.raises(ConfigError) as refused:
        check_unknown_tokens(word_tokenizer(lowercase=True), rows)
    line = str(refused.value)
    assert "1 prompt of" in line and "training row 0, prompt 'What is one ?'" in line
    assert "'W' at character 0 decodes back as 'w'" in line


def test_a_byte_level_tokenizer_without_an_unknown_token_carries_everything():
    check_unknown_tokens(byte_tokenizer(), ROWS)


def test_a_long_row_is_shown_as_an_excerpt_around_the_character():
    long = "what is one plus two ? " * 6 + "😀 " + "what is one ? " * 6
    with pytest.raises(ConfigError) as refused:
        check_unknown_tokens(word_tokenizer(), [RunRow("held-out", 7, long, None)])
    line = str(refused.value)
    assert "held-out row 7, prompt '...lus two ? 😀 what is one ? what is one ? ...'" in line
    assert len(line) < 400
