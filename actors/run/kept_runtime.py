"""What a run keeps of the run it continues: the choices its config left to the machine.

`precision.dtype`, `sampling.dtype`, `model.attn_implementation` and `model.linear_kernel` set to
`auto`, and the torch and decoding thread counts left to their rule or timed, are made concrete
when a rank starts (`actors.run.loop.runtime_settings`, recorded in runtime.json). Each checkpoint
carries what they became (`runtime` in its extra.json). A rank that restores a checkpoint (a
`--resume`, or a worker Ray Train restarts after a failure) computes with those choices instead of
making them again: a choice made again on a busy or another machine could differ, and with it
every later digit of the run.

A setting the config names explicitly is the config's, on a resume too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainer.config import TrainerConfig

# runtime.json key -> (config section, field) of the setting that `auto` leaves to the machine
KEPT_SETTINGS: dict[str, tuple[str, str]] = {
    "precision": ("precision", "dtype"),
    "sampling_precision": ("sampling", "dtype"),
    "attention": ("model", "attn_implementation"),
    "linear_kernel": ("model", "linear_kernel"),
}
AUTO = "auto"


@dataclass(frozen=True)
class KeptRuntime:
    """The runtime record of the run a checkpoint was written by, and the checkpoint's step."""

    record: Mapping[str, Any]
    step: int

    @classmethod
    def of_checkpoint(cls, extra: Mapping[str, Any]) -> KeptRuntime | None:
        """From a checkpoint's extra.json; None for a checkpoint written without one."""
        record = extra.get("runtime")
        if not isinstance(record, Mapping):
            return None
        return cls(record, int(extra["step"]))

    def _kept(self, key: str, setting: Any) -> bool:
        return setting in (AUTO, None) and self.record.get(key) is not None

    def trainer_config(self, cfg: TrainerConfig) -> TrainerConfig:
        """`cfg` with each setting left to `auto` made what the run computed with."""
        sections: dict[str, dict[str, Any]] = {}
        for key, (section, field) in KEPT_SETTINGS.items():
            part = getattr(cfg, section)
            if field in type(part).model_fields and self._kept(key, getattr(part, field)):
                sections.setdefault(section, {})[field] = self.record[key]
        return cfg.model_copy(
            update={name: getattr(cfg, name).model_copy(update=fields) for name, fields in sections.items()}
        )

    def torch_threads(self, setting: int | None) -> int | None:
        """The torch thread count: the config's, else the one the run computed with."""
        return self.record["torch_threads"] if self._kept("torch_threads", setting) else setting

    def sampling_threads(self, setting: int | str | None) -> int | str | None:
        """Decoding's thread count: the config's count, else (the rule, or timed) the run's."""
        return self.record["sampling_threads"] if self._kept("sampling_threads", setting) else setting

    def record_of(self, cfg: TrainerConfig, torch_threads: Any, sampling_threads: Any) -> dict[str, Any]:
        """What runtime.json says of the kept choices: the run's own reasons for them (a kept
        choice would otherwise read "set in the config"), and the step they were kept from."""
        kept: dict[str, Any] = {}
        for key, (section, field) in KEPT_SETTINGS.items():
            part = getattr(cfg, section)
            if field in type(part).model_fields and self._kept(key, getattr(part, field)):
                kept[f"{key}_reason"] = self.record.get(f"{key}_reason")
        if self._kept("sampling_threads", sampling_threads):
            kept["sampling_threads_from"] = self.record.get("sampling_threads_from")
        kept_names = [k.removesuffix("_reason").removesuffix("_from") for k in kept]
        if self._kept("torch_threads", torch_threads):
            kept_names.append("torch_threads")
        if kept_names:
            kept["kept_from_step"] = self.step
            kept["kept"] = sorted(kept_names)
        return kept
