"""A UCI chess engine (Stockfish) as a deterministic judge of moves, through python-chess.

    judge = EngineJudge(EngineConfig())        # starts nothing yet
    best = judge.best(board)                   # Judgement(move, cp) from the side to move
    cp = judge.score_of(board, move)           # the same search, restricted to `move`
    judge.close()

Repeatable by construction: one thread, a node budget instead of a clock, and `ucinewgame`
(hash cleared) before every search, so a position searched in any process, in any order, gets the
same answer. The engine process starts on first use, in the process that uses it, and is bound
to that process's life: on Linux it gets SIGKILL when its parent dies (kill -9 included), so a
killed reward worker never leaves an engine behind.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys
import threading
import weakref
from typing import NamedTuple

import chess
import chess.engine

from rewards.config import EngineConfig

DEBIAN_PATH = "/usr/games/stockfish"  # Debian/Ubuntu install it outside PATH
INSTALL_HINT = "install Stockfish (apt-get install stockfish, brew install stockfish) or set task.engine.path"
_MATE_CP = 100_000  # a mate scores beyond any material count; losses are capped by max_cp_loss


class EngineUnavailable(RuntimeError):
    """No engine binary, or one that does not start: the message is one line saying what to do."""


class Judgement(NamedTuple):
    move: chess.Move
    cp: int  # centipawns from the side to move's point of view (mates as +-_MATE_CP)


def find_engine(path: str | None) -> str:
    """The engine binary to run: `path`, else 'stockfish' on PATH, else Debian's; EngineUnavailable if none."""
    if path is not None:
        found = shutil.which(path)
        if found is None:
            raise EngineUnavailable(f"task.engine.path: {path!r} is not an executable file; {INSTALL_HINT}")
        return found
    found = shutil.which("stockfish") or shutil.which(DEBIAN_PATH)
    if found is None:
        raise EngineUnavailable(
            f"the move task needs a chess engine: no 'stockfish' on PATH nor at {DEBIAN_PATH}; {INSTALL_HINT}"
        )
    return found


def _die_with_parent() -> None:
    """Runs in the engine's process before exec: SIGKILL it when the thread that started it ends."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class EngineJudge:
    """One engine process, started lazily; not thread-safe (one per worker, as a reward is)."""

    def __init__(self, cfg: EngineConfig):
        self.cfg = cfg
        self._engine: chess.engine.SimpleEngine | None = None
        self._owner_pid: int | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def pid(self) -> int | None:
        """The engine's process id while it runs."""
        if self._engine is None:
            return None
        return self._engine.transport.get_pid()  # type: ignore[attr-defined]

    def engine(self) -> chess.engine.SimpleEngine:
        if self._engine is not None and self._owner_pid != os.getpid():
            self._engine = None  # inherited through fork: that process is not ours to talk to
        if self._engine is None:
            binary = find_engine(self.cfg.path)
            try:
                engine = chess.engine.SimpleEngine.popen_uci(
                    binary, timeout=self.cfg.start_timeout_s, preexec_fn=_die_with_parent
                )
                engine.configure({"Threads": 1, "Hash": self.cfg.hash_mb})
            except Exception as exc:
                raise EngineUnavailable(
                    f"chess engine {binary} did not start: {type(exc).__name__}: {exc}"
                ) from exc
            self._engine, self._owner_pid = engine, os.getpid()
            # python-chess runs each engine on a non-daemon thread, which the interpreter joins at
            # exit before atexit handlers run: quit the engine from the hook that runs earlier.
            self._finalizer = weakref.finalize(self, _quit, engine)
            self._finalizer.atexit = False
            _at_thread_shutdown(self._finalizer)
        return self._engine

    def _search(self, board: chess.Board, root: chess.Move | None) -> chess.engine.InfoDict:
        limit = chess.engine.Limit(nodes=self.cfg.nodes)
        roots = None if root is None else [root]
        # A new `game` object makes python-chess send ucinewgame: the hash starts empty every time.
        try:
            return self.engine().analyse(board, limit, root_moves=roots, game=object())
        except chess.engine.EngineTerminatedError:
            self._engine = None  # it died (killed, crashed): the next search starts a new one
            raise

    def best(self, board: chess.Board) -> Judgement:
        """The engine's move in `board` and its score (board must have a legal move)."""
        info = self._search(board, None)
        return Judgement(info["pv"][0], _cp(info, board))

    def score_of(self, board: chess.Board, move: chess.Move) -> int:
        """Centipawns of playing `move` in `board`, searched like `best` but only that move at the root."""
        return _cp(self._search(board, move), board)

    def close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None and self._owner_pid == os.getpid():
            if self._finalizer is not None:
                self._finalizer.detach()
            _quit(engine)

    def __getstate__(self) -> dict[str, object]:
        return {
            "cfg": self.cfg,
            "_engine": None,
            "_owner_pid": None,
            "_finalizer": None,
        }  # a process never travels


def _at_thread_shutdown(fn: weakref.finalize) -> None:
    register = getattr(threading, "_register_atexit", None)  # CPython >= 3.9
    if register is not None:
        register(fn)


def _quit(engine: chess.engine.SimpleEngine) -> None:
    try:
        engine.quit()
    except Exception:  # already gone: nothing left to stop
        pass


def _cp(info: chess.engine.InfoDict, board: chess.Board) -> int:
    return info["score"].pov(board.turn).score(mate_score=_MATE_CP)
