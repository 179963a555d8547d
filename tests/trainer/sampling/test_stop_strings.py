"""Stop strings: the scorer's text ends before the first one, the loss mask at the token completing it."""

import torch

from trainer.policy.attention import positions_from_mask
from trainer.policy.char_tokenizer import CharTokenizer
from trainer.sampling.rollout import Rollout, completions_text
from trainer.sampling.stop import apply_stop_strings, first_stop

tok = CharTokenizer("abcd;\n")


def rollout_of(prompt: str, completions: list[str], eos: bool = True) -> Rollout:
    """A hand-made rollout: one prompt, one row per completion text (EOS after it when `eos`)."""
    p = tok.encode_prompt(prompt)
    rows = [tok.encode(c) + ([tok.eos_id] if eos else []) for c in completions]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.pad_id)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = True
    attn = torch.cat([torch.ones((len(rows), len(p)), dtype=torch.bool), mask], dim=1)
    return Rollout(
        input_ids=torch.cat([torch.tensor([p] * len(rows)), ids], dim=1),
        attn_mask=attn,
        position_ids=positions_from_mask(attn),
        completion_mask=mask,
        old_logprobs=torch.where(mask, torch.full(mask.shape, -0.5), torch.zeros(mask.shape)),
        prompt_len=len(p),
        group_size=len(rows),
    )


def test_first_stop_finds_the_earliest_of_several():
    assert first_stop("ab;c\nd", [";", "\n"]) == 2
    assert first_stop("ab\nc;", [";", "\n"]) == 2
    assert first_stop("abcd", [";"]) is None and first_stop("a;b", ["", ";"]) == 1


def test_text_ends_before_the_stop_and_the_mask_at_its_last_token():
    r = rollout_of("ab", ["ab;cd", "abcd", "a\n\nb"])
    cut, texts = apply_stop_strings(r, tok, [";", "\n\n"])
    assert texts == ["ab", "abcd", "a"]
    # row 0 keeps 'a', 'b', ';' (the stop is trained on), row 1 everything up to EOS, row 2 'a\n\n'
    assert cut.completion_mask.sum(1).tolist() == [3, 5, 3]
    p = r.prompt_len
    assert tok.decode(cut.input_ids[0, p:]) == "ab;" and tok.decode(cut.input_ids[2, p:]) == "a\n\n"
    assert (cut.input_ids[:, p:][~cut.completion_mask] == tok.pad_id).all()
    assert (cut.old_logprobs[~cut.completion_mask] == 0).all()
    assert (cut.old_logprobs[cut.completion_mask] == -0.5).all()
    assert torch.equal(cut.attn_mask[:, p:], cut.completion_mask)
    # the kept tokens keep their positions: only what follows the stop changed
    kept = cut.attn_mask
    assert torch.equal(cut.position_ids[kept], r.position_ids[kept])
    assert torch.equal(cut.completion_mask[1], r.completion_mask[1])


def test_no_stop_strings_or_none_found_leave_the_rollout_as_it_is():
    r = rollout_of("ab", ["abc", "d"], eos=False)
    for stop in ([], [";"]):
        same, texts = apply_stop_strings(r, tok, stop)
        assert same is r and texts == completions_text(r, tok)


class PieceTokenizer:
    """Tokens of several characters, so a stop string can end inside one."""

    pieces = {1: "ab", 2: "c;", 3: "d", 4: ";x"}
    pad_id, eos_id = 0, 9

    def decode(self, ids, stop_at_eos=True):
        out = []
        for i in ids:
            if stop_at_eos and i == self.eos_id:
                break
            out.append(self.pieces.get(i, ""))
        return "".join(out)


def test_a_stop_ending_inside_a_token_keeps_that_token():
    mask = torch.ones((2, 3), dtype=torch.bool)
    r = Rollout(
        input_ids=torch.tensor([[5, 1, 2, 3], [5, 3, 4, 1]]),
        attn_mask=torch.ones((2, 4), dtype=torch.bool),
        position_ids=torch.arange(4).repeat(2, 1),
        completion_mask=mask,
        old_logprobs=torch.full((2, 3), -1.0),
        prompt_len=1,
        group_size=2,
    )
    cut, texts = apply_stop_strings(r, PieceTokenizer(), [";"])
    assert texts == ["abc", "d"]
    assert cut.completion_mask.tolist() == [[True, True, False], [True, True, False]]
