"""The chess task: a SAN move list from the standard start (prompt) -> the FEN after it (target).

    Pair(prompt="e4 e5 Nf3", target="rnbqkbnr/pppp1ppp/8/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R b KQkq - 1 2")

Generated data is a pure function of (seed, index): pair i comes from its own `random.Random`
seeded through sha256, so a trainer resumes at a data position exactly and every machine gets
the same pairs. Only `Random.random()` is drawn from (its stream is fixed across Python versions)
and legal moves are sorted before choosing (independent of python-chess's generation order).

Held-out split by construction: a position is held out iff the sha1 of its FEN's first four
fields (placement, side, castling, en passant) falls in bucket 0 of 16. Training generation
never yields one (it redraws), evaluation generation yields only those, so the two never meet.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import itertools
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import chess
import chess.pgn

from trainer.data.held_out import fill_by_length, length_quotas, plies_of
from trainer.data.pairs import DataFileError, LoadReport, Pair, RecordErrors

# Characters of SAN move lists: squares, pieces, capture, check, mate, promotion, castling, spaces.
SAN_ALPHABET = "abcdefgh12345678KQRBNx+#=O- "
# Characters of FEN strings: pieces, empty-square counts, ranks, side to move, castling, en passant.
FEN_ALPHABET = "pnbrqkPNBRQK0123456789/ wb-KQkqabcdefgh"
# What a chess task's prompts and targets are written in (the built-in tokenizer's alphabet).
CHESS_ALPHABET = "".join(sorted(set(SAN_ALPHABET + FEN_ALPHABET)))

HELD_OUT_BUCKETS = 16  # 1 position in 16 is held out
MAX_TRAIN_ATTEMPTS = 1000  # redraws of one training index before its ply range is declared unusable
EVAL_PATIENCE = 20_000  # games in a row without a new held-out position before eval generation gives up
_NON_SPACE = re.compile(r"\S")

# natural=True: a move's weight is the product of the factors that apply to it (others weigh 1).
NATURAL_WEIGHTS: dict[str, float] = {
    "castling": 8.0,
    "capture": 4.0,
    "central_pawn": 4.0,  # a pawn move landing on files c-f, ranks 3-6
    "development": 3.0,  # a knight or bishop leaving its own back rank
    "king_walk": 0.25,  # a king move that is not castling
}
_CENTRE = chess.SquareSet(
    chess.BB_FILE_C | chess.BB_FILE_D | chess.BB_FILE_E | chess.BB_FILE_F
) & chess.SquareSet(chess.BB_RANK_3 | chess.BB_RANK_4 | chess.BB_RANK_5 | chess.BB_RANK_6)


# --- held-out split -------------------------------------------------------------------------


def position_key(fen: str) -> str:
    """The first four FEN fields: what makes two positions the same, move counters aside."""
    return " ".join(fen.split()[:4])


def is_held_out(fen: str) -> bool:
    """True for the ~1/16 of positions reserved for evaluation (stable across machines)."""
    digest = hashlib.sha1(position_key(fen).encode()).digest()
    return int.from_bytes(digest[:8], "big") % HELD_OUT_BUCKETS == 0


# --- random games ---------------------------------------------------------------------------


def _rng(*parts: object) -> random.Random:
    """A generator seeded from the parts via sha256 (never `hash()`, which varies per process)."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _move_weight(board: chess.Board, move: chess.Move) -> float:
    piece = board.piece_type_at(move.from_square)
    if board.is_castling(move):
        return NATURAL_WEIGHTS["castling"]
    weight = NATURAL_WEIGHTS["capture"] if board.is_capture(move) else 1.0
    if piece == chess.PAWN and move.to_square in _CENTRE:
        weight *= NATURAL_WEIGHTS["central_pawn"]
    elif piece in (chess.KNIGHT, chess.BISHOP) and chess.square_rank(move.from_square) == (
        0 if board.turn == chess.WHITE else 7
    ):
        weight *= NATURAL_WEIGHTS["development"]
    elif piece == chess.KING:
        weight *= NATURAL_WEIGHTS["king_walk"]
    return weight


def _choose(board: chess.Board, rng: random.Random, natural: bool) -> chess.Move | None:
    moves = sorted(board.legal_moves, key=lambda m: (m.from_square, m.to_square, m.promotion or 0))
    if not moves:
        return None
    if not natural:
        return moves[int(rng.random() * len(moves))]
    cumulative = list(itertools.accumulate(_move_weight(board, m) for m in moves))
    return moves[min(bisect.bisect_right(cumulative, rng.random() * cumulative[-1]), len(moves) - 1)]


def _random_game(rng: random.Random, min_plies: int, max_plies: int, natural: bool) -> Pair | None:
    """A game of a random length in [min_plies, max_plies]; one ended by mate or stalemate keeps
    the plies it has if they reach min_plies, else None."""
    plies = min_plies + int(rng.random() * (max_plies - min_plies + 1))
    board, sans = chess.Board(), []
    for _ in range(plies):
        move = _choose(board, rng, natural)
        if move is None:
            break
        sans.append(board.san_and_push(move))
    if len(sans) < min_plies:
        return None
    return Pair(" ".join(sans), board.fen())


def _check_args(min_plies: int, max_plies: int, **ints: int) -> None:
    for name, value in {"min_plies": min_plies, "max_plies": max_plies, **ints}.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0 and name not in ("seed", "eval_seed"):
            raise ValueError(f"{name} must be >= 0, got {value}")
    if min_plies > max_plies:
        raise ValueError(f"min_plies ({min_plies}) must be <= max_plies ({max_plies})")


def pair_at(seed: int, index: int, min_plies: int, max_plies: int, natural: bool = False) -> Pair:
    """Training pair number `index` of stream `seed`: never a held-out position."""
    _check_args(min_plies, max_plies, seed=seed, index=index)
    for attempt in range(MAX_TRAIN_ATTEMPTS):
        pair = _random_game(_rng("train", seed, index, attempt), min_plies, max_plies, natural)
        if pair is not None and not is_held_out(pair.target):
            return pair
    raise ValueError(
        f"no training position with plies in [{min_plies}, {max_plies}] after {MAX_TRAIN_ATTEMPTS} "
        f"draws (seed {seed}, index {index}): every reachable position is held out; widen the range"
    )


@dataclass(frozen=True)
class GameStream:
    """The generated training stream as a picklable callable: `stream(i)` is `pair_at(seed, i, ...)`."""

    seed: int
    min_plies: int
    max_plies: int
    natural: bool = False

    def __call__(self, index: int) -> Pair:
        return pair_at(self.seed, index, self.min_plies, self.max_plies, self.natural)


def iter_pairs(
    seed: int, min_plies: int, max_plies: int, natural: bool = False, start: int = 0
) -> Iterator[Pair]:
    """Training pairs start, start+1, ... without end."""
    for index in itertools.count(start):
        yield pair_at(seed, index, min_plies, max_plies, natural)


def generate_pairs(
    n: int, seed: int, min_plies: int, max_plies: int, natural: bool = False, start: int = 0
) -> list[Pair]:
    """Training pairs start .. start+n-1 (the same as `pair_at` for each index)."""
    _check_args(min_plies, max_plies, n=n, seed=seed, start=start)
    return list(itertools.islice(iter_pairs(seed, min_plies, max_plies, natural, start), n))


def canonical_fen(fen: str) -> str:
    """python-chess's spelling of a FEN (`chess.Board(fen).fen()`): a target written by another tool
    (an en-passant square python-chess omits, extra spaces) compares with what the policy learns."""
    return chess.Board(fen.strip()).fen()


def _eval_games(eval_seed: int, plies: int, natural: bool, patience: int) -> Iterator[Pair]:
    """Distinct held-out pairs of games of exactly `plies` plies; ends after `patience` misses in a row."""
    seen: set[str] = set()
    misses = 0
    for index in itertools.count():
        pair = _random_game(_rng("eval", eval_seed, plies, index), plies, plies, natural)
        if pair is None or not is_held_out(pair.target) or position_key(pair.target) in seen:
            misses += 1
            if misses > patience:
                return
            continue
        seen.add(position_key(pair.target))
        misses = 0
        yield pair


def eval_pairs(
    n: int,
    eval_seed: int,
    min_plies: int,
    max_plies: int,
    natural: bool = False,
    *,
    patience: int = EVAL_PATIENCE,
) -> list[Pair]:
    """`n` held-out pairs with distinct positions, with training's mix of lengths (uniform over
    [min_plies, max_plies]; `trainer.data.held_out`), deterministic for a given eval_seed.

    Raises ValueError when the range holds fewer than n distinct held-out positions that
    `patience` games in a row can find (e.g. 1-ply games reach only 20 positions).
    """
    _check_args(min_plies, max_plies, n=n, eval_seed=eval_seed, patience=patience)
    lengths = range(min_plies, max_plies + 1)
    quotas = length_quotas(n, dict.fromkeys(lengths, 1.0))
    # a length that has run out of new positions is given up after misses in proportion to what it
    # was asked for (1-ply games hold about one held-out position: no need for `patience` misses)
    pairs = fill_by_length(
        quotas, lambda plies, want: _eval_games(eval_seed, plies, natural, min(patience, 20 * want + 200))
    )
    if len(pairs) < n:
        raise ValueError(
            f"found only {len(pairs)} of {n} distinct held-out positions with plies in "
            f"[{min_plies}, {max_plies}]; widen the ply range or ask for fewer"
        )
    return pairs


def eval_pairs_from(pairs: list[Pair], n: int, eval_seed: int) -> list[Pair]:
    """Up to n held-out pairs of a data file (distinct held-out positions among its pairs), with the
    length mix of its training pairs; a seeded shuffle picks among the positions of each length."""
    by_length: dict[int, list[Pair]] = {}
    train_mix: dict[int, float] = {}
    seen: set[str] = set()
    for pair in pairs:
        plies = plies_of(pair.prompt)
        if not is_held_out(pair.target):
            train_mix[plies] = train_mix.get(plies, 0.0) + 1.0
        elif position_key(pair.target) not in seen:
            seen.add(position_key(pair.target))
            by_length.setdefault(plies, []).append(pair)
    if not by_length:
        raise ValueError("the data file holds no held-out position (1 in 16 distinct positions is held out)")
    for plies, group in by_length.items():
        _rng("eval-file", eval_seed, plies).shuffle(group)
        train_mix.setdefault(plies, 0.0)
    weights = (
        {plies: w for plies, w in train_mix.items()}
        if sum(train_mix.values())
        else dict.fromkeys(by_length, 1.0)
    )
    return fill_by_length(length_quotas(n, weights), lambda plies, want: by_length.get(plies, []))


# --- loaders --------------------------------------------------------------------------------


class _QuietGameBuilder(chess.pgn.GameBuilder):
    """Collects parse errors on the game (as the default does) without logging each one."""

    def handle_error(self, error: Exception) -> None:
        self.game.errors.append(error)


def _read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise DataFileError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _game_problem(game: chess.pgn.Game) -> str | None:
    if game.errors:
        return f"{type(game.errors[0]).__name__}: {game.errors[0]}"
    board = game.board()
    if type(board) is not chess.Board or board.chess960 or board.fen() != chess.STARTING_FEN:
        return "does not start from the standard position (FEN/Variant header); prompts start there"
    if game.next() is None:
        return "no moves"
    return None


def _game_pairs(game: chess.pgn.Game, min_plies: int, max_plies: int) -> list[Pair]:
    board, sans, pairs = chess.Board(), [], []
    if min_plies == 0:
        pairs.append(Pair("", board.fen()))
    for ply, move in enumerate(game.mainline_moves(), start=1):
        if ply > max_plies:
            break
        sans.append(board.san_and_push(move))
        if ply >= min_plies:
            pairs.append(Pair(" ".join(sans), board.fen()))
    return pairs


def load_pgn(path: str | Path, min_plies: int, max_plies: int, strict: bool = False) -> LoadReport:
    """Every prefix of every game whose length lies in [min_plies, max_plies] becomes a pair.

    A malformed game (illegal or unreadable move, custom start, no moves) is skipped and reported
    as "file:line: game N: reason", line being where the game starts; strict=True raises instead.
    """
    _check_args(min_plies, max_plies)
    text = _read_text(path)
    handle, errors, pairs, where = io.StringIO(text), RecordErrors(path, strict), [], []
    line, counted_to = 1, 0
    for number in itertools.count(1):
        start = handle.tell()
        game = chess.pgn.read_game(handle, Visitor=_QuietGameBuilder)
        if game is None:
            break
        first = _NON_SPACE.search(text, start)
        begins = first.start() if first else start
        line, counted_to = line + text.count("\n", counted_to, begins), begins
        problem = _game_problem(game)
        if problem is not None:
            errors.add(line, f"game {number}: {problem}")
            continue
        found = _game_pairs(game, min_plies, max_plies)
        pairs.extend(found)
        where.extend([f"{path}:{line}: game {number}"] * len(found))
    return LoadReport(pairs, errors.count, errors.messages, tuple(where))
