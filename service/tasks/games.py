"""The keys of the tasks whose positions come from generated games (`trainer.data.chess_games`):
the fen task's prompts, the move task's positions."""

from __future__ import annotations

from pydantic import Field, model_validator

from service.tasks.base import TaskConfigBase


class GamesConfig(TaskConfigBase):
    """How long the generated games are, and how they are played."""

    min_plies: int = Field(1, ge=0, description="fewest half-moves in a generated game's prompt")
    max_plies: int = Field(4, ge=0, description="most half-moves in a generated game's prompt")
    natural: bool = Field(False, description="weight moves toward more natural play")

    @model_validator(mode="after")
    def _check_plies(self) -> GamesConfig:
        if self.min_plies > self.max_plies:
            raise ValueError(f"min_plies ({self.min_plies}) must be <= max_plies ({self.max_plies})")
        return self
