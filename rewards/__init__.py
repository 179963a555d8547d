"""Pure reward functions for the FEN task and user rewards (python-chess + Levenshtein; no Ray, no torch).

from rewards import score, score_batch
score("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1", target).total
"""

from rewards.config import EngineConfig, RewardConfig, UserRewardSpec
from rewards.move import MoveScorer
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
from rewards.scorer import Scorer, UserRewardScorer, build_scorer, default_scorer, score, score_batch
from rewards.signature import RewardParams, RewardSignatureError, reward_params

__all__ = [
    "BAD_INPUT",
    "ERROR",
    "EngineConfig",
    "INVALID",
    "MoveScorer",
    "OK",
    "STATUSES",
    "SKIPPED",
    "TIMEOUT",
    "TOO_LONG",
    "UNPARSABLE",
    "USABLE_STATUSES",
    "RewardConfig",
    "RewardParams",
    "RewardSignatureError",
    "RewardSpecError",
    "ScoreResult",
    "Scorer",
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
    "unregister_reward",
]
