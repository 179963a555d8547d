"""Environments: tasks that answer back (a game's reply, a tool's output) over several turns.

A user writes a class (`rewards.env.base.Environment`): `reset(row)` gives the first observation
(the prompt), `step(action)` the next one with the turn's reward and whether the episode is done.
`rewards.env.episode.Episode` runs one instance under the episode's rules (turn limit, explicit
statuses, never an exception out of it); `rewards.env.host.LocalEpisodes` runs a batch of them for
the sampler. Pure: no Ray, no torch.
"""

from rewards.env.base import Environment, StepResult
from rewards.env.episode import EPISODE_STATUSES, Episode, EpisodeResult
from rewards.env.host import LocalEpisodes
from rewards.env.loading import BUNDLED_ENVIRONMENTS, EnvSpecError, load_environment

__all__ = [
    "BUNDLED_ENVIRONMENTS",
    "EPISODE_STATUSES",
    "EnvSpecError",
    "Environment",
    "Episode",
    "EpisodeResult",
    "LocalEpisodes",
    "StepResult",
    "load_environment",
]
