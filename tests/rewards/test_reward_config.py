import pydantic
import pytest

from rewards import RewardConfig, UserRewardSpec


def test_defaults_match_the_formula():
    cfg = RewardConfig()
    assert (cfg.validity_weight, cfg.similarity_weight, cfg.exact_weight) == (0.25, 0.5, 0.25)
    assert (cfg.max_chars, cfg.cache_size, cfg.user) == (512, 65536, [])


def test_frozen_and_unknown_keys_rejected():
    cfg = RewardConfig()
    with pytest.raises(pydantic.ValidationError):
        cfg.max_chars = 3
    with pytest.raises(pydantic.ValidationError, match="extra"):
        RewardConfig(similarity=0.5)


@pytest.mark.parametrize(
    "bad",
    [{"max_chars": 0}, {"cache_size": -1}, {"validity_weight": float("nan")}, {"exact_weight": float("inf")}],
)
def test_bad_values_rejected(bad):
    with pytest.raises(pydantic.ValidationError, match=next(iter(bad))):
        RewardConfig(**bad)


def test_duplicate_user_reward_rejected():
    spec = UserRewardSpec(fn="Levenshtein:ratio")
    with pytest.raises(pydantic.ValidationError, match="listed twice"):
        RewardConfig(user=[spec, spec])


def test_round_trips_through_a_dict():
    cfg = RewardConfig(max_chars=100, user=[UserRewardSpec(fn="pkg.mod:Class.method", weight=-0.5)])
    assert RewardConfig.model_validate(cfg.model_dump()) == cfg
