import pydantic
import pytest

from rewards import FenRewardConfig, RewardConfig, UserRewardSpec


def test_defaults_match_the_formula():
    fen = FenRewardConfig()
    assert (fen.validity_weight, fen.similarity_weight, fen.exact_weight) == (0.25, 0.5, 0.25)
    assert fen.cache_size == 65536
    cfg = RewardConfig()
    assert (cfg.max_chars, cfg.user) == (512, [])


def test_the_fen_weights_are_the_fen_rewards_keys_not_every_tasks():
    assert set(RewardConfig.model_fields) == {"max_chars", "user"}
    with pytest.raises(
        pydantic.ValidationError,
        match=r"validity_weight is a key of the fen reward \(rewards.FenRewardConfig",
    ):
        RewardConfig(validity_weight=0.5)


def test_frozen_and_unknown_keys_rejected():
    cfg = RewardConfig()
    with pytest.raises(pydantic.ValidationError):
        cfg.max_chars = 3
    with pytest.raises(pydantic.ValidationError, match="extra"):
        RewardConfig(similarity=0.5)


@pytest.mark.parametrize(
    ("model", "bad"),
    [
        (RewardConfig, {"max_chars": 0}),
        (FenRewardConfig, {"cache_size": -1}),
        (FenRewardConfig, {"validity_weight": float("nan")}),
        (FenRewardConfig, {"exact_weight": float("inf")}),
    ],
)
def test_bad_values_rejected(model, bad):
    with pytest.raises(pydantic.ValidationError, match=next(iter(bad))):
        model(**bad)


def test_duplicate_user_reward_rejected():
    spec = UserRewardSpec(fn="Levenshtein:ratio")
    with pytest.raises(pydantic.ValidationError, match="listed twice"):
        RewardConfig(user=[spec, spec])


def test_round_trips_through_a_dict():
    cfg = RewardConfig(max_chars=100, user=[UserRewardSpec(fn="pkg.mod:Class.method", weight=-0.5)])
    assert RewardConfig.model_validate(cfg.model_dump()) == cfg
