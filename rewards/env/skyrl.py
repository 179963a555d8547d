"""SkyRL-gym environments, played unchanged through the environment seam.

A SkyRL-gym environment (`skyrl_gym.envs.base_text_env.BaseTextEnv`, PyPI `skyrl-gym`) is built
per episode as `Env(env_config, extras)` with the dataset row as `extras` (its `reward_spec`,
`extra_info`, ...), started with `init(prompt) -> (prompt, metadata)` where the prompt is a list of
chat messages, and stepped with `step(action) -> {observations, reward, done, metadata}` where the
observations are chat messages too; `close()` ends it. `load_environment` wraps any class of that
shape (an `init` and a `step`, no `reset`) in `SkyRLEnvironment`:

- the first observation is the text of the last user message of what `init` returns (the policy
  is given it as a prompt: through the chat template, for an hf policy that uses one, with the
  task's `system` message if set);
- each step's observation messages become one answer, their contents joined by newlines (through
  the chat template as a user message);
- each step's reward is a turn's reward: the episode's reward is their sum (`task.episode_reward`);
- each step's `metadata` (a dict) is the turn's info, and `get_metrics()` at the episode's end its
  episode info: the evaluation records keep both, and a class's own `aggregate_metrics` (one that
  is not `BaseTextEnv`'s default mean) turns a step's episode infos into its `env_metrics`;
- the environment is replayed after a lost worker only when its class says
  `deterministic = True` (SkyRL's do not say it: they end such an episode `env_error`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from rewards.env.base import Environment, StepResult


def is_skyrl_class(cls: Any) -> bool:
    """A class of SkyRL-gym's shape: `init` and `step`, and no `reset` of ours."""
    return (
        isinstance(cls, type)
        and callable(getattr(cls, "init", None))
        and callable(getattr(cls, "step", None))
        and not callable(getattr(cls, "reset", None))
    )


def _text(messages: Any, what: str) -> str:
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        raise ValueError(f"{what} must be a list of chat messages, got {type(messages).__name__}")
    return "\n".join(str(m.get("content", "")) for m in messages)


def _last_user(messages: Any) -> str:
    if isinstance(messages, str):
        return messages
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, Mapping) and message.get("role") == "user":
                return str(message.get("content", ""))
    raise ValueError("init must return a prompt with a user message (a list of chat messages)")


class SkyRLEnvironment(Environment):
    """One SkyRL-gym environment class behind the seam (`wrap_skyrl` makes the subclass)."""

    skyrl_cls: ClassVar[type]
    env_config: ClassVar[Any] = None
    alphabet = ""

    def reset(self, row: Mapping[str, Any]) -> str:
        self.env = self.skyrl_cls(self.env_config, dict(row))
        prompt = row.get("prompt", [])
        out = self.env.init(prompt)
        first = out[0] if isinstance(out, tuple) else out
        return _last_user(first)

    def step(self, action: str) -> StepResult:
        out = self.env.step(action)
        if not isinstance(out, Mapping) or not {"observations", "reward", "done"} <= out.keys():
            raise ValueError(
                f"a SkyRL step must return a dict with observations, reward and done, got {out!r:.80}"
            )
        reward, metadata = out["reward"], out.get("metadata")
        info = dict(metadata) if isinstance(metadata, Mapping) else None  # kept per turn in the records
        return StepResult(_text(out["observations"], "observations"), float(reward), bool(out["done"]), info)

    def episode_info(self) -> Mapping[str, Any] | None:
        get_metrics = getattr(getattr(self, "env", None), "get_metrics", None)
        return get_metrics() if callable(get_metrics) else None

    def close(self) -> None:
        env = getattr(self, "env", None)
        if env is not None and callable(getattr(env, "close", None)):
            env.close()


def _own_aggregate_metrics(cls: type) -> Any:
    """The class's own `aggregate_metrics`, or None where it has none or keeps SkyRL's default (the
    mean per key, which the trainer computes itself, over every rank without gathering infos)."""
    aggregate = getattr(cls, "aggregate_metrics", None)
    if not callable(aggregate) or getattr(aggregate, "__qualname__", "") == "BaseTextEnv.aggregate_metrics":
        return None
    return aggregate


def wrap_skyrl(cls: type) -> type[Environment]:
    """`cls` (a SkyRL-gym environment class) as an `Environment`."""
    aggregate = _own_aggregate_metrics(cls)
    return type(
        f"SkyRL{cls.__name__}",
        (SkyRLEnvironment,),
        {
            "skyrl_cls": cls,
            "deterministic": bool(getattr(cls, "deterministic", False)),
            "aggregate_metrics": None if aggregate is None else staticmethod(aggregate),
            "__module__": __name__,
            "__doc__": f"The SkyRL-gym environment {cls.__module__}.{cls.__qualname__}.",
        },
    )
