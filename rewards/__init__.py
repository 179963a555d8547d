"""Pure reward functions: the scorer of named components and user rewards, the fen, move and code
tasks' components, and the registry of user rewards (python-chess + Levenshtein; no Ray, no torch).

from rewards import score, score_batch
score("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1", target).total
"""

from rewards.config import EngineConfig, FenRewardConfig, RewardConfig, UserRewardSpec
from rewards.fen import (
    ExactMatch,
    FenScorer,
    FenValidity,
    Similarity,
    build_scorer,
    default_scorer,
    score,
    score_batch,
    score_totals,
)
from rewards.move import MoveQuality, MoveScorer
from rewards.registry import (
    RewardSpecError,
    register_reward,
    registered_rewards,
    resolve_reward,
    unregister_reward,
)
from rewards.result import (
    BAD_INPUT,
    ERROR,
    INVALID,
    OK,
    SKIPPED,
    STATUSES,
    TIMEOUT,
    TOO_LONG,
    UNPARSABLE,
    USABLE_STATUSES,
    ScoreResult,
)
from rewards.scorer import Part, RewardComponent, Scorer, UserRewardScorer
from rewards.signature import RewardParams, RewardSignatureError, reward_params

__all__ = [
    "BAD_INPUT",
    "ERROR",
    "EngineConfig",
    "ExactMatch",
    "FenRewardConfig",
    "FenScorer",
    "FenValidity",
    "INVALID",
    "MoveQuality",
    "MoveScorer",
    "OK",
    "STATUSES",
    "SKIPPED",
    "TIMEOUT",
    "TOO_LONG",
    "UNPARSABLE",
    "USABLE_STATUSES",
    "Part",
    "RewardComponent",
    "RewardConfig",
    "RewardParams",
    "RewardSignatureError",
    "RewardSpecError",
    "ScoreResult",
    "Scorer",
    "Similarity",
    "UserRewardScorer",
    "UserRewardSpec",
    "build_scorer",
    "default_scorer",
    "register_reward",
    "reward_params",
    "registered_rewards",
    "resolve_reward",
    "score",
    "score_batch",
    "score_totals",
    "unregister_reward",
]
