"""The chess task data: deterministic generation, the held-out split, and the file loaders."""

import json
import random

import chess
import pytest

from trainer.data.chess_games import (
    NATURAL_WEIGHTS,
    eval_pairs,
    generate_pairs,
    is_held_out,
    iter_pairs,
    load_pgn,
    pair_at,
    position_key,
)
from trainer.data.pairs import DataFileError, LoadReport, Pair, file_stream, load_jsonl


def replay(prompt: str) -> chess.Board:
    board = chess.Board()
    for san in prompt.split():
        board.push_san(san)
    return board


# --- generation -----------------------------------------------------------------------------


def test_known_first_pair():
    # Regression check: a change here changes every generated data set.
    assert pair_at(0, 0, 1, 4) == Pair(
        "h3 b5 a4", "rnbqkbnr/p1pppppp/8/1p6/P7/7P/1PPPPPP1/RNBQKBNR b KQkq - 0 2"
    )
    assert pair_at(0, 0, 1, 4, natural=True) == Pair(
        "g3 c5 Nh3", "rnbqkbnr/pp1ppppp/8/2p5/8/6PN/PPPPPP1P/RNBQKB1R b KQkq - 1 2"
    )


@pytest.mark.parametrize("natural", [False, True])
def test_same_seed_same_pairs_and_pair_i_from_seed_and_index(natural):
    pairs = generate_pairs(50, 7, 1, 12, natural=natural)
    assert pairs == generate_pairs(50, 7, 1, 12, natural=natural)
    assert pairs != generate_pairs(50, 8, 1, 12, natural=natural)
    assert generate_pairs(10, 7, 1, 12, natural=natural, start=40) == pairs[40:]
    assert pair_at(7, 33, 1, 12, natural) == pairs[33]
    stream = iter_pairs(7, 1, 12, natural, start=45)
    assert [next(stream) for _ in range(5)] == pairs[45:]


@pytest.mark.parametrize(("lo", "hi"), [(0, 0), (1, 1), (3, 5), (20, 40)])
def test_ply_range_respected_and_targets_are_replayed_fens(lo, hi):
    for prompt, target in generate_pairs(60, 3, lo, hi):
        assert lo <= len(prompt.split()) <= hi
        assert "." not in prompt and prompt == prompt.strip()  # no move numbers
        assert replay(prompt).fen() == target


def test_natural_play_differs_and_favours_castling_and_captures():
    plain = generate_pairs(300, 1, 10, 20)
    natural = generate_pairs(300, 1, 10, 20, natural=True)
    assert plain != natural
    count = lambda pairs, s: sum(p.prompt.count(s) for p in pairs)  # noqa: E731
    assert count(natural, "O-O") > 2 * count(plain, "O-O")
    assert count(natural, "x") > count(plain, "x")
    assert NATURAL_WEIGHTS["castling"] > 1 and NATURAL_WEIGHTS["king_walk"] < 1
    for prompt, target in natural[:50]:
        assert replay(prompt).fen() == target


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((5, 0, 3, 2), ValueError, r"min_plies \(3\) must be <= max_plies \(2\)"),
        ((5, 0, -1, 2), ValueError, "min_plies must be >= 0"),
        ((-1, 0, 1, 2), ValueError, "n must be >= 0"),
        ((5, "0", 1, 2), TypeError, "seed must be an int"),
        ((5, 0, 1.0, 2), TypeError, "min_plies must be an int"),
    ],
)
def test_bad_arguments(args, error, match):
    with pytest.raises(error, match=match):
        generate_pairs(*args)


# --- held-out split -------------------------------------------------------------------------


def test_held_out_is_about_one_in_sixteen_and_ignores_move_counters():
    rng, keys = random.Random(0), set()
    for _ in range(400):  # plain random games, independent of the generator under test
        board = chess.Board()
        for _ in range(rng.randint(6, 30)):
            board.push(rng.choice(list(board.legal_moves)))
            keys.add(position_key(board.fen()))
    share = sum(map(is_held_out, keys)) / len(keys)
    assert len(keys) > 5000 and 0.05 < share < 0.075
    fen = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"
    assert position_key(fen) == "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq -"
    assert is_held_out(fen) == is_held_out(fen.replace("- 0 1", "- 7 40"))


def test_training_never_yields_held_out_and_evaluation_only_held_out():
    train = generate_pairs(20_000, 0, 1, 4)
    assert not any(is_held_out(p.target) for p in train)
    evaluation = eval_pairs(64, 1_000_003, 1, 4)
    assert len(evaluation) == 64 and all(is_held_out(p.target) for p in evaluation)
    eval_keys = {position_key(p.target) for p in evaluation}
    assert len(eval_keys) == 64  # distinct from each other
    assert not eval_keys & {position_key(p.target) for p in train}
    for prompt, target in evaluation:
        assert 1 <= len(prompt.split()) <= 4 and replay(prompt).fen() == target


def test_eval_pairs_are_a_deterministic_prefix():
    ten = eval_pairs(10, 5, 2, 8, natural=True)
    assert eval_pairs(10, 5, 2, 8, natural=True) == ten
    assert eval_pairs(4, 5, 2, 8, natural=True) == ten[:4]


def test_eval_generation_errors_clearly_when_the_range_is_too_small():
    # 1-ply games reach only 20 positions, of which about one is held out.
    with pytest.raises(ValueError, match=r"found only \d+ of 64 distinct held-out positions .*\[1, 1\]"):
        eval_pairs(64, 1_000_003, 1, 1, patience=2_000)


def test_training_errors_clearly_when_every_position_is_held_out(monkeypatch):
    import trainer.data.chess_games as data

    monkeypatch.setattr(data, "is_held_out", lambda fen: True)
    monkeypatch.setattr(data, "MAX_TRAIN_ATTEMPTS", 20)
    with pytest.raises(ValueError, match=r"no training position with plies in \[1, 2\] after 20 draws"):
        data.pair_at(0, 0, 1, 2)


# --- PGN ------------------------------------------------------------------------------------

PGN = """[Event "first"]
[Result "*"]

1. e4 e5 2. Nf3 Nc6 *

[Event "illegal move in the middle"]
[Result "*"]

1. e4 e5 2. Ke3 Nc6 *

[Event "set-up position"]
[FEN "4k3/8/8/8/8/8/8/4K3 w - - 0 1"]
[SetUp "1"]

1. Kf1 Kf8 *

[Event "last"]
[Result "1-0"]

1. d4 d5 2. c4 1-0
"""


def test_pgn_prefixes_in_range_and_malformed_games_skipped(tmp_path):
    path = tmp_path / "games.pgn"
    path.write_text(PGN)
    report = load_pgn(path, 1, 3)
    assert isinstance(report, LoadReport)
    assert [p.prompt for p in report.pairs] == ["e4", "e4 e5", "e4 e5 Nf3", "d4", "d4 d5", "d4 d5 c4"]
    assert all(replay(p).fen() == t for p, t in report.pairs)
    assert report.skipped == 2
    assert report.errors[0].startswith(f"{path}:6: game 2: IllegalMoveError") and "Ke3" in report.errors[0]
    assert report.errors[1].startswith(f"{path}:11: game 3: does not start from the standard position")


def test_pgn_zero_plies_and_upper_bound(tmp_path):
    path = tmp_path / "one.pgn"
    path.write_text('[Event "x"]\n\n1. e4 e5 2. Nf3 Nc6 3. Bb5 *\n')
    prompts = [p.prompt for p in load_pgn(path, 0, 2).pairs]
    assert prompts == ["", "e4", "e4 e5"]
    assert load_pgn(path, 0, 2).pairs[0].target == chess.STARTING_FEN
    assert [p.prompt for p in load_pgn(path, 5, 9).pairs] == ["e4 e5 Nf3 Nc6 Bb5"]


def test_pgn_strict_raises_at_first_malformed_game(tmp_path):
    path = tmp_path / "games.pgn"
    path.write_text(PGN)
    with pytest.raises(DataFileError, match=r"games\.pgn:6: game 2: IllegalMoveError"):
        load_pgn(path, 1, 3, strict=True)


def test_pgn_garbage_between_games(tmp_path):
    path = tmp_path / "junk.pgn"
    path.write_text("1. e4 e5 *\n\nthis is not a game ###\n\n1. d4 *\n")
    report = load_pgn(path, 1, 2)
    assert [p.prompt for p in report.pairs] == ["e4", "e4 e5", "d4"]
    assert report.skipped == 1 and ":3: game 2: no moves" in report.errors[0]


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(DataFileError, match="nope.pgn: cannot read"):
        load_pgn(tmp_path / "nope.pgn", 1, 2)
    with pytest.raises(DataFileError, match="nope.jsonl: cannot read"):
        load_jsonl(tmp_path / "nope.jsonl")


# --- JSONL ----------------------------------------------------------------------------------


def jsonl_fixture(tmp_path):
    good = {"prompt": "e4", "target": "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"}
    lines = [
        json.dumps(good).encode(),
        b"",  # blank: skipped silently
        b"{not json",
        json.dumps([1, 2]).encode(),
        json.dumps({"prompt": "e4"}).encode(),
        json.dumps({"prompt": 5, "target": "x"}).encode(),
        b'{"prompt": "\xff\xfe", "target": "x"}',
        json.dumps({**good, "prompt": "e4 e5", "source": "extra keys are fine"}).encode(),
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path, good


def test_jsonl_reports_each_bad_line(tmp_path):
    path, good = jsonl_fixture(tmp_path)
    report = load_jsonl(path)
    assert report.pairs == [Pair(good["prompt"], good["target"]), Pair("e4 e5", good["target"])]
    assert report.skipped == 5
    reasons = [e.removeprefix(f"{path}:") for e in report.errors]
    assert reasons[0].startswith("3: invalid JSON")
    assert reasons[1] == "4: expected an object with 'prompt' and 'target', got list"
    assert reasons[2] == "5: missing 'target'"
    assert reasons[3] == "6: 'prompt' must be a string, got int"
    assert reasons[4].startswith("7: not UTF-8")


def test_jsonl_strict_raises_naming_file_and_line(tmp_path):
    path, _ = jsonl_fixture(tmp_path)
    with pytest.raises(DataFileError, match=r"pairs\.jsonl:3: invalid JSON"):
        load_jsonl(path, strict=True)


def test_jsonl_clean_file_strict(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text('{"prompt": "", "target": "t"}\r\n{"prompt": "d4", "target": "u"}')
    assert load_jsonl(path, strict=True) == LoadReport(
        [Pair("", "t"), Pair("d4", "u")], 0, [], (f"{path}:1", f"{path}:2")
    )


def test_file_stream_shuffles_each_epoch_and_covers_every_pair():
    pairs = [Pair(str(i), "t") for i in range(5)]
    at = file_stream(pairs, seed=3)
    first, second = [at(i).prompt for i in range(5)], [at(i).prompt for i in range(5, 10)]
    assert sorted(first) == sorted(second) == ["0", "1", "2", "3", "4"]
    assert first != second or first != ["0", "1", "2", "3", "4"]
    assert [at(i).prompt for i in range(5)] == first  # a pure function of the index
    with pytest.raises(ValueError, match="no usable pairs"):
        file_stream([], seed=0)
