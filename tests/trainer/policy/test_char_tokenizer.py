import random

import chess
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from trainer.data.chess_games import CHESS_ALPHABET, FEN_ALPHABET, SAN_ALPHABET
from trainer.policy.char_tokenizer import CharTokenizer, UnknownCharacterError

tok = CharTokenizer(CHESS_ALPHABET)


def random_game(seed: int, plies: int) -> tuple[str, str]:
    """(SAN move list, FEN) of a random legal game."""
    rng = random.Random(seed)
    board = chess.Board()
    moves = []
    for _ in range(plies):
        legal = list(board.legal_moves)
        if not legal:
            break
        move = rng.choice(legal)
        moves.append(board.san(move))
        board.push(move)
    return " ".join(moves), board.fen()


def test_specials_and_vocab():
    assert tok.pad_id == 0
    assert len({tok.pad_id, tok.bos_id, tok.sep_id, tok.eos_id}) == 4
    assert tok.vocab_size == 4 + len(set(SAN_ALPHABET + FEN_ALPHABET)) == 42
    ids = tok.encode(SAN_ALPHABET + FEN_ALPHABET)
    assert min(ids) == 4 and max(ids) == tok.vocab_size - 1
    assert tok.alphabet == CHESS_ALPHABET


def test_ids_do_not_depend_on_alphabet_order():
    assert CharTokenizer("ab").encode("ab") == CharTokenizer("ba").encode("ab")


@pytest.mark.parametrize("seed", range(20))
def test_round_trip_real_san_and_fen(seed):
    san, fen = random_game(seed, plies=1 + seed * 7)
    for text in (san, fen):
        assert tok.decode(tok.encode(text)) == text


@given(st.text(alphabet=tok.alphabet, max_size=80))
def test_round_trip_any_alphabet_text(text):
    ids = tok.encode(text)
    assert len(ids) == len(text)
    assert tok.decode(ids) == text


def test_unknown_character_names_char_and_position():
    with pytest.raises(UnknownCharacterError) as err:
        tok.encode("e4 é5")
    assert isinstance(err.value, ValueError)
    assert err.value.char == "é" and err.value.position == 3
    assert "'é'" in str(err.value) and "position 3" in str(err.value)
    with pytest.raises(UnknownCharacterError, match="'\\\\n'"):
        tok.encode_prompt("e4\n")


def test_decode_never_fails_on_garbage_ids():
    garbage = [-5, 10**9, tok.pad_id, tok.bos_id, tok.sep_id, 999, tok.encode("e")[0]]
    assert tok.decode(garbage) == "e"
    assert tok.decode([]) == ""
    assert tok.decode(torch.tensor(garbage)) == "e"


def test_decode_stops_at_eos_unless_told_not_to():
    ids = [*tok.encode("e4"), tok.eos_id, *tok.encode("e5")]
    assert tok.decode(ids) == "e4"
    assert tok.decode(ids, stop_at_eos=False) == "e4e5"


def test_encode_prompt_and_pair_layout():
    prompt, target = "e4 e5", "8/8/8/8/8/8/8/8 w - - 0 1"
    p_ids = tok.encode_prompt(prompt)
    assert p_ids == [tok.bos_id, *tok.encode(prompt), tok.sep_id]
    ids, loss_mask = tok.encode_pair(prompt, target)
    assert ids == p_ids + tok.encode(target) + [tok.eos_id]
    assert len(loss_mask) == len(ids)
    assert loss_mask == [False] * len(p_ids) + [True] * (len(target) + 1)
    assert tok.decode([i for i, m in zip(ids, loss_mask, strict=True) if m]) == target
