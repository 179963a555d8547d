"""Text that a `transformers` tokenizer cannot carry, found before the run.

A tokenizer without some of the data's characters (emoji, CJK, accents under an uncased
normaliser) encodes them as its unknown token or as other text, and the run would sample from and
teach that instead, silently. The built-in policy's character tokenizer refuses such characters
(`service.preflight.data`); this is the same refusal for an hf model. Each prompt and target the
run will use is encoded alone (no special tokens, no chat template) and decoded back; it is lost
when its ids hold the tokenizer's unknown token (where it has one) or when the decoded text differs
from it in anything but whitespace, which tokenizers place their own way (a space between word
pieces, runs of spaces collapsed). Byte-level tokenizers (GPT-2, Llama 3, Qwen) carry every text and
pass. The run is refused with one line unless `model.unknown_tokens=allow`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from service.config_keys import ConfigError

ENCODE_BATCH = 1024  # texts encoded per tokenizer call
EXCERPT_CHARS = 40


class RunRow(NamedTuple):
    """One row the run will use: its split ("training", "held-out"), its index there, its texts."""

    split: str
    index: int
    prompt: str
    target: str | None


def check_unknown_tokens(tok: Any, rows: Sequence[RunRow], setting: str = "refuse") -> None:
    """ConfigError (one line) when a prompt or target of `rows` does not survive `tok` (a
    `transformers` tokenizer), giving the count per field and the first such row; nothing with
    setting="allow"."""
    if setting == "allow" or not rows:
        return
    texts = [
        (row, field, text) for row in rows for field, text in (("prompt", row.prompt), ("target", row.target))
    ]
    texts = [t for t in texts if t[2]]
    lost = [t for t, bad in zip(texts, _lost(tok, [text for _, _, text in texts]), strict=True) if bad]
    if not lost:
        return
    counts = {field: sum(f == field for _, f, _ in lost) for field in ("prompt", "target")}
    what = " and ".join(f"{n} {field}{'s' if n > 1 else ''}" for field, n in counts.items() if n)
    row, field, text = lost[0]
    reason, at = _why(tok, text)
    raise ConfigError(
        f"model.unknown_tokens: the model's tokenizer cannot carry {what} of the run's data; the first: "
        f"{row.split} row {row.index}, {field} {_excerpt(text, at)!r}: {reason}; use another model or "
        "data, or set model.unknown_tokens=allow to train on them as they encode"
    )


def _lost(tok: Any, texts: list[str]) -> Iterator[bool]:
    """Whether each text holds the unknown token or fails to decode back to itself."""
    unk = tok.unk_token_id
    for start in range(0, len(texts), ENCODE_BATCH):
        chunk = texts[start : start + ENCODE_BATCH]
        encoded = tok(chunk, add_special_tokens=False)["input_ids"]
        for text, ids in zip(chunk, encoded, strict=True):
            yield (unk is not None and unk in ids) or _squeezed(_decode(tok, ids)) != _squeezed(text)


def _why(tok: Any, text: str) -> tuple[str, int]:
    """What goes wrong with `text`, and the character where it does."""
    unk = tok.unk_token_id
    ids = list(tok(text, add_special_tokens=False)["input_ids"])
    if unk is not None and unk in ids:
        spans = _offsets(tok, text)
        if spans is not None:
            begin, end = spans[ids.index(unk)]
            return (
                f"{text[begin:end]!r} at character {begin} encodes as the unknown token {tok.unk_token!r}",
                begin,
            )
        return f"it encodes with the unknown token {tok.unk_token!r}", 0
    decoded = _decode(tok, ids)
    a, b = _squeezed(text), _squeezed(decoded)
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    visible = [j for j, c in enumerate(text) if not c.isspace()] or [0]
    at = visible[min(i, len(visible) - 1)]
    got = repr(b[i]) if i < len(b) else "nothing"
    return f"{text[at]!r} at character {at} decodes back as {got} ({_excerpt(decoded, 0)!r})", at


def _offsets(tok: Any, text: str) -> list[tuple[int, int]] | None:
    try:
        return list(tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"])
    except (NotImplementedError, ValueError, TypeError, KeyError):  # a tokenizer without offsets
        return None


def _decode(tok: Any, ids: Sequence[int]) -> str:
    return tok.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _squeezed(text: str) -> str:
    return "".join(text.split())


def _excerpt(text: str, at: int) -> str:
    """At most EXCERPT_CHARS characters of `text` around position `at`."""
    begin = max(0, min(at - 10, len(text) - EXCERPT_CHARS))
    out = text[begin : begin + EXCERPT_CHARS]
    return ("..." if begin else "") + out + ("..." if begin + EXCERPT_CHARS < len(text) else "")
