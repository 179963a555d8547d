"""What every config of the project is made of: a frozen pydantic model, and sections with variants."""

from __future__ import annotations

from typing import Annotated, Any, NamedTuple, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Frozen(BaseModel):
    """Base for every config of the project: immutable, unknown keys and non-finite floats rejected.

    (`rewards/` imports nothing of ours, so `rewards.config` repeats these settings; a test keeps
    the two equal.)
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _fill_variant_tags(cls, data: Any) -> Any:
        # A tagged union section given without its key (`model: {size: tiny}`) is the default variant.
        if not isinstance(data, dict):
            return data
        for name, field in cls.model_fields.items():
            section = data.get(name)
            for mark in field.metadata:
                if isinstance(mark, VariantDefault) and isinstance(section, dict) and mark.key not in section:
                    data = {**data, name: {mark.key: mark.default, **section}}
        return data


class VariantDefault(NamedTuple):
    """Marks a tagged union field: the variant taken when the data does not name one."""

    key: str
    default: str


def tagged_union(key: str, default: str, *models: type[BaseModel]) -> Any:
    """A config section with variants: each model fixes `key` to its own tag (a one-value Literal) and
    owns its keys; the data's `key` picks the variant (pydantic's discriminator), `default` when it is
    absent. A key of another variant is refused like any unknown key (no variant is guessed)."""
    return Annotated[Union[models], Field(discriminator=key), VariantDefault(key, default)]  # noqa: UP007
