"""The built-in policy's character tokenizer, built from the characters a task needs.

Sequences look like `BOS prompt SEP target EOS`; PAD (id 0) fills batches. Every character is one
token, so the vocabulary is tiny (42 ids for the chess tasks' SAN and FEN characters) and an
encoding never loses information.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

SPECIAL_TOKENS = ("<pad>", "<bos>", "<sep>", "<eos>")


class UnknownCharacterError(ValueError):
    """A character outside the tokenizer's alphabet."""

    def __init__(self, char: str, position: int, text: str, alphabet: str = "") -> None:
        preview = text if len(text) <= 60 else text[:57] + "..."
        super().__init__(
            f"character {char!r} at position {position} of {preview!r} is not in the tokenizer "
            f"alphabet (allowed: {alphabet!r})"
        )
        self.char, self.position, self.text, self.alphabet = char, position, text, alphabet

    def __reduce__(self):  # the constructor's arguments, so it survives pickling (Ray sends it back)
        return (type(self), (self.char, self.position, self.text, self.alphabet))


class CharTokenizer:
    """Maps characters to ids 4.. and back; ids 0..3 are PAD, BOS, SEP, EOS."""

    def __init__(self, alphabet: str) -> None:
        chars = sorted(set(alphabet))  # sorted: ids do not depend on the order of the alphabet text
        self.pad_id, self.bos_id, self.sep_id, self.eos_id = range(len(SPECIAL_TOKENS))
        self._char_to_id = {c: i + len(SPECIAL_TOKENS) for i, c in enumerate(chars)}
        self._id_to_char = {i: c for c, i in self._char_to_id.items()}
        self.vocab_size = len(SPECIAL_TOKENS) + len(chars)
        self.alphabet = "".join(chars)

    def encode(self, text: str) -> list[int]:
        """Ids of each character of `text`; raises UnknownCharacterError on the first unknown one."""
        table = self._char_to_id
        try:
            return [table[c] for c in text]
        except KeyError:
            pos = next(i for i, c in enumerate(text) if c not in table)
            raise UnknownCharacterError(text[pos], pos, text, self.alphabet) from None

    def encode_text(self, text: str) -> list[int]:
        """Ids of text that goes into a sequence as it is."""
        return self.encode(text)

    def encode_observation(self, text: str) -> list[int]:
        """An environment's answer after the policy's turn: its text as it is."""
        return self.encode(text)

    def decode(self, ids: Iterable[int], stop_at_eos: bool = True) -> str:
        """Text of `ids`; specials and unknown ids are dropped, never an error.

        `ids` may be a list or a 1-D tensor. With `stop_at_eos`, decoding ends at the first EOS.
        """
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        out = []
        table = self._id_to_char
        for i in ids:
            if stop_at_eos and i == self.eos_id:
                break
            c = table.get(i)
            if c is not None:
                out.append(c)
        return "".join(out)

    def encode_prompt(self, prompt: str) -> list[int]:
        """`BOS prompt SEP`: what the sampler is given; the completion follows the SEP."""
        return [self.bos_id, *self.encode(prompt), self.sep_id]

    def encode_pair(self, prompt: str, target: str) -> tuple[list[int], list[bool]]:
        """`BOS prompt SEP target EOS` and its loss mask (aligned with the ids).

        loss_mask[i] is True where ids[i] is a target character or the final EOS: the token the
        model must predict from position i-1.
        """
        prompt_ids = self.encode_prompt(prompt)
        target_ids = [*self.encode(target), self.eos_id]
        return prompt_ids + target_ids, [False] * len(prompt_ids) + [True] * len(target_ids)

    def batch_decode(self, rows: Sequence[Iterable[int]], stop_at_eos: bool = True) -> list[str]:
        return [self.decode(r, stop_at_eos=stop_at_eos) for r in rows]
