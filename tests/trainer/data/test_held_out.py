"""The held-out set: training's mix of game lengths, from the training data's own source."""

from collections import Counter

import chess
import pytest

from trainer.data.chess_games import canonical_fen, eval_pairs, eval_pairs_from, generate_pairs, is_held_out
from trainer.data.held_out import fill_by_length, length_quotas, plies_of
from trainer.data.pairs import Pair


def test_quotas_follow_the_weights():
    assert length_quotas(10, {1: 1, 2: 1, 3: 1}) == {1: 4, 2: 3, 3: 3}
    assert length_quotas(8, {2: 3, 5: 1}) == {2: 6, 5: 2}
    assert sum(length_quotas(128, {n: 1 for n in range(1, 17)}).values()) == 128


def test_a_short_length_spreads_its_shortfall_over_the_longer_ones():
    pools = {
        1: [Pair("a", "1")],
        2: [Pair(f"a {i}", f"2{i}") for i in range(50)],
        3: [Pair(f"a b {i}", f"3{i}") for i in range(50)],
    }
    got = fill_by_length({1: 10, 2: 10, 3: 10}, lambda n, want: pools[n])
    assert Counter(plies_of(p.prompt) for p in got) == {1: 1, 2: 15, 3: 14}
    assert [plies_of(p.prompt) for p in got[:3]] == [1, 2, 3]  # interleaved by length


def test_generated_held_out_set_has_the_training_length_mix():
    held = eval_pairs(96, 1_000_003, 1, 4)
    train = Counter(plies_of(p.prompt) for p in generate_pairs(400, 0, 1, 4))
    lengths = Counter(plies_of(p.prompt) for p in held)
    assert (
        len(held) == 96 and len({p.target for p in held}) == 96 and all(is_held_out(p.target) for p in held)
    )
    assert min(train.values()) > 80  # training: about a quarter at each length
    # 1-ply games hold only about one held-out position; the other lengths share the rest evenly
    assert lengths[1] <= 2 and abs(lengths[3] - lengths[4]) <= 1 and lengths[2] >= 20
    assert eval_pairs(96, 1_000_003, 1, 4) == held  # deterministic


def _game_pairs(n_games: int) -> list[Pair]:
    pairs = []
    for g in range(n_games):
        board, sans = chess.Board(), []
        for ply in range(1, 7):
            moves = sorted(board.legal_moves, key=lambda m: m.uci())
            move = moves[(g * 7 + ply * 3) % len(moves)]
            sans.append(board.san_and_push(move))
            pairs.append(Pair(" ".join(sans), board.fen()))
    return pairs


def test_held_out_set_of_a_data_file_comes_from_the_file():
    pairs = _game_pairs(300)
    held = eval_pairs_from(pairs, 20, 5)
    assert held and all(is_held_out(p.target) for p in held)
    assert {p.target for p in held} <= {p.target for p in pairs}
    assert len({p.target for p in held}) == len(held) <= 20
    assert eval_pairs_from(pairs, 20, 5) == held
    with pytest.raises(ValueError, match="no held-out position"):
        eval_pairs_from([p for p in pairs if not is_held_out(p.target)], 20, 5)


def test_targets_are_canonicalised():
    after_e4 = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 1"
    assert canonical_fen(after_e4 + "  \n") == "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"
    with pytest.raises(ValueError):
        canonical_fen("not a fen")
