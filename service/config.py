"""The service's one typed config, resolved once at the edge from a preset, a file and overrides.

    cfg = load_config("demo", config_file="my.yaml", overrides=["grpo.steps=80", "sampling.temperature=0.8"])

Sources, later wins: the preset (`service.presets.PRESETS`), the YAML file, then each
`dotted.key=value` override (the value is parsed as a YAML scalar). Every problem surfaces as a
`ConfigError` whose message is one line naming the dotted key, the value and what is allowed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from actors.pool.config import PoolConfig
from actors.pool.node_resources import check_custom_resources, check_label_selector
from rewards import RewardConfig
from service.config_keys import ConfigError, describe_error, field_at, quoted
from service.config_moved import moved_keys, moved_override
from service.config_sources import deep_merge, read_config_file, set_dotted, switch_variants
from service.config_sources import parse_override as _parse_override
from service.presets import DEFAULT_PRESET, PRESETS
from service.tasks import TASKS, FenTaskConfig, TaskConfig
from trainer.config import TrainerConfig
from trainer.config_base import Frozen
from trainer.strategy import FSDPConfig, StrategyName, fsdp_unavailable_reason

# Run ids name a directory, Ray actors and metric tags: keep them to safe characters.
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


class ScalingConfig(Frozen):
    """The Ray Train worker group: one data-parallel rank per worker."""

    num_workers: int = Field(1, ge=1, description="trainer workers (data-parallel ranks)")
    strategy: StrategyName = Field(
        "ddp",
        description="how the trainer workers hold the policy: ddp, a whole copy with its gradients and AdamW's "
        "moments on each (DDP above one worker); fsdp, each transformer block sharded over the workers (FSDP2), "
        "about 1/num_workers of them on each, gathered block by block (and whole for decoding); fsdp needs 2 or "
        "more workers; `python -m service.train --plan` estimates each worker's peak memory under either",
    )
    fsdp: FSDPConfig | None = Field(
        None, description="FSDP's settings (read with scaling.strategy=fsdp only): param_dtype, resharding"
    )
    device_memory_gib: float | None = Field(
        None,
        gt=0.0,
        description="memory of each trainer worker's device (GiB), which the memory plan checks a run against "
        "before it starts; unset: this machine's GPU with use_gpu (unchecked when it has none), else this "
        "machine's memory shared among the trainer workers",
    )
    use_gpu: bool = Field(False, description="one CUDA device per worker (NCCL); CPU workers use gloo")
    cpus_per_worker: float = Field(1.0, gt=0.0, description="logical CPUs Ray reserves per trainer worker")
    gpus_per_worker: float = Field(1.0, gt=0.0, description="GPUs per trainer worker (with use_gpu)")
    torch_threads: int | None = Field(
        None,
        ge=1,
        description="torch threads of each trainer worker; unset: the node's cores shared among the trainer "
        "workers on it (Ray alone would give ceil(cpus_per_worker))",
    )
    sampling_threads: Annotated[int, Field(ge=1)] | Literal["auto"] | None = Field(
        None,
        description="torch threads of a CPU trainer worker while it decodes; unset: one thread where a decode "
        "step is small (2 x parameters x rows under 128 MFLOP) and OpenMP's wait is passive, else torch_threads "
        "(the same choice every run); auto: timed when the worker starts (1, 2, 4 .. torch_threads; fewer kept "
        "only when 1.2x faster), which adapts to the machine but may choose differently from run to run",
    )
    omp_wait_policy: Literal["auto", "passive", "active", "inherit"] = Field(
        "auto",
        description="how OpenMP's idle threads wait: auto keeps OpenMP's own short spin unless the trainer "
        "workers' threads outnumber the node's cores (then passive), and leaves an OMP_WAIT_POLICY already "
        "in the environment; passive sleeps at once (OMP_WAIT_POLICY=PASSIVE, KMP_BLOCKTIME=0: for a node "
        "shared with other jobs); active spins; inherit leaves the environment as it is. The driver sets it "
        "for the local Ray it starts; on a cluster it joins, passive and active go into the trainer workers' "
        "runtime_env, and auto and inherit leave the cluster's environment",
    )
    resources_per_worker: dict[str, float] = Field(
        default_factory=dict,
        description="Ray custom resources each trainer worker takes, e.g. {trainer_node: 1}: trainers then "
        "run only on nodes started with that resource",
    )
    label_selector: dict[str, str] = Field(
        default_factory=dict, description="Ray node labels a trainer worker's node must carry"
    )

    @field_validator("resources_per_worker")
    @classmethod
    def _custom_resources(cls, value: dict[str, float]) -> dict[str, float]:
        return check_custom_resources(value, "scaling.cpus_per_worker")

    @field_validator("label_selector")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        return check_label_selector(value)


class RunConfig(Frozen):
    """Identity, storage and bookkeeping of one run."""

    name: str | None = Field(None, pattern=RUN_ID_PATTERN, description="run id (default: grpo-<date>-<hex>)")
    run_dir: str | None = Field(
        None, description="records and checkpoints (default: <storage_path or runs>/<run id>)"
    )
    storage_path: str | None = Field(
        None, description="root for runs on storage every node sees (NFS, a shared volume); needed multi-node"
    )
    max_failures: int = Field(
        0, ge=-1, description="Ray Train restarts of a failed worker group (-1: unlimited)"
    )
    log_every: int = Field(1, ge=1, description="steps between progress lines in a job log (at least)")
    log_interval_s: float = Field(
        10.0, ge=0.0, description="seconds between progress lines in a job log (at least; 0: every step)"
    )
    eval_samples: int = Field(3, ge=0, description="sample completions kept in each eval record")
    num_cpus: int | None = Field(
        None,
        ge=1,
        description="logical CPUs of the embedded local Ray (default: this machine's, or what the run needs)",
    )
    dashboard: bool = Field(False, description="start the dashboard with the embedded local Ray")
    backend: Literal["ray_train", "local"] = Field(
        "ray_train",
        description="what runs the training loop: ray_train, a Ray Train worker group (scaling.num_workers "
        "DDP ranks; restarts per run.max_failures); local, the one rank in the driver process, without Ray "
        "Train's start-up (its controller and worker actors, ~13 s on 2 cores), for scaling.num_workers=1 "
        "only; Ray still runs the reward pool and the control actor, and checkpoints keep the same layout",
    )

    @field_validator("storage_path", "run_dir")
    @classmethod
    def _local_path(cls, value: str | None) -> str | None:
        # Records are written with plain file I/O: a URI would become a local directory named 's3:'.
        if value is not None and "://" in value:
            raise ValueError(
                f"{value!r} is a URI; expected a filesystem path (for shared storage, a mounted volume)"
            )
        return value


class WandbConfig(Frozen):
    """Weights & Biases: where the run is logged (`pip install -e '.[wandb]'`)."""

    project: str = Field(..., min_length=1, description="W&B project")
    entity: str | None = Field(None, description="W&B team or user (default: yours)")
    mode: Literal["online", "offline", "disabled"] = Field(
        "online", description="offline writes <run dir>/wandb/ only (`wandb sync` uploads it later)"
    )


class LoggingConfig(Frozen):
    """Loggers fed every record of metrics.jsonl and eval.jsonl by the driver."""

    tensorboard: bool = Field(
        False,
        description="TensorBoard event files in <run dir>/tensorboard/ (`pip install -e '.[tensorboard]'`)",
    )
    wandb: WandbConfig | None = Field(None, description="log to Weights & Biases: {project, entity, mode}")
    rollouts_every: int = Field(
        0,
        ge=0,
        description="every this many GRPO steps, write training completions to <run dir>/rollouts.jsonl "
        "(prompt, completion, reward, status, advantage; rank 0's first logging.rollout_groups groups); 0: off",
    )
    rollout_groups: int = Field(4, ge=1, description="prompt groups per step written to rollouts.jsonl")


class ServiceConfig(TrainerConfig):
    """Everything one run needs: the trainer's sections plus task, reward, pool, scaling, run and logging."""

    task: TaskConfig = FenTaskConfig()
    reward: RewardConfig = RewardConfig()
    pool: PoolConfig = PoolConfig()
    scaling: ScalingConfig = ScalingConfig()
    run: RunConfig = RunConfig()
    logging: LoggingConfig = LoggingConfig()

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        return moved_keys(data) if isinstance(data, dict) else data  # `service.config_moved`

    @model_validator(mode="after")
    def _check_prompt_format(self) -> ServiceConfig:
        if self.task.chat_template and self.model.source != "hf":
            raise ValueError(
                "task.chat_template: true needs model.source=hf (the built-in GPT has no chat template)"
            )
        if self.task.system is not None and not self.task.chat_template:
            raise ValueError("task.system is read only with task.chat_template: true")
        return self

    @model_validator(mode="after")
    def _check_task(self) -> ServiceConfig:
        problem = TASKS[self.task.name].check_config(self)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _check_backend(self) -> ServiceConfig:
        workers = self.scaling.num_workers
        if self.run.backend == "local" and workers != 1:
            raise ValueError(
                f"run.backend: 'local' runs one rank in the driver process; it needs scaling.num_workers=1 "
                f"(got {workers}); use ray_train for more"
            )
        return self

    @model_validator(mode="after")
    def _check_strategy(self) -> ServiceConfig:
        if problem := self._strategy_problem():
            raise ValueError(problem)
        return self

    def _strategy_problem(self) -> str | None:
        """The line refusing the strategy settings, or None: fsdp with one worker (nothing to
        shard), FSDP's own settings given to a ddp run, the decode step's CUDA graphs (they replay
        reads of weight addresses that fsdp gathers anew every step), a torch too old for FSDP2."""
        scaling = self.scaling
        if scaling.strategy == "ddp":
            if scaling.fsdp is not None:
                return "scaling.fsdp is read with scaling.strategy=fsdp only; drop it or set scaling.strategy=fsdp"
            return None
        if scaling.num_workers < 2:
            return (
                "scaling.strategy: 'fsdp' shards the policy over the trainer workers, and scaling.num_workers is 1: "
                "there is nothing to shard; use scaling.strategy=ddp (one process) or 2 or more workers"
            )
        if self.sampling.cuda_graphs:
            return (
                "sampling.cuda_graphs replays decode steps that read the weights where they were, and "
                "scaling.strategy=fsdp gathers them anew each step; set sampling.cuda_graphs=false"
            )
        return fsdp_unavailable_reason("cuda" if scaling.use_gpu else "cpu")

    @model_validator(mode="after")
    def _check_shares(self) -> ServiceConfig:
        # Each rank takes an equal, contiguous share of a step's items (DDP runs the same number
        # of backward passes on every rank).
        workers = self.scaling.num_workers
        if self.sft.steps and self.sft.batch_size % workers:
            raise ValueError(
                f"sft.batch_size ({self.sft.batch_size}) must be a multiple of scaling.num_workers ({workers})"
            )
        if self.grpo.steps and self.grpo.prompts_per_step % workers:
            raise ValueError(
                f"grpo.prompts_per_step ({self.grpo.prompts_per_step}) must be a multiple of "
                f"scaling.num_workers ({workers})"
            )
        return self


def prompt_format(cfg: ServiceConfig):
    """How the policy's tokenizer renders prompts (`trainer.policy.PromptFormat`)."""
    from trainer.policy.base import PromptFormat

    return PromptFormat(cfg.task.chat_template, cfg.task.system)


def trainer_config(cfg: ServiceConfig) -> TrainerConfig:
    """The trainer's own config: exactly its sections of the service config."""
    return TrainerConfig(**{name: getattr(cfg, name) for name in TrainerConfig.model_fields})


def config_to_yaml(cfg: BaseModel) -> str:
    """The resolved config as YAML (loads back to the same config with `--config`)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, default_flow_style=False)


# --------------------------------------------------------------------------- loading


def load_config(
    preset: str = DEFAULT_PRESET, config_file: str | None = None, overrides: Sequence[str] = ()
) -> ServiceConfig:
    """Preset, then the YAML file, then `dotted.key=value` overrides; validated once."""
    if preset not in PRESETS:
        raise ConfigError(f"preset: {preset!r} is not allowed; expected one of {quoted(PRESETS)}")
    data = copy.deepcopy(PRESETS[preset])
    if config_file is not None:
        file_data = read_config_file(config_file)
        data = deep_merge(switch_variants(data, file_data, ServiceConfig), file_data)
    parsed = [parse_override(override) for override in overrides]
    given: dict[str, Any] = {}
    for key, value in parsed:
        set_dotted(given, key, value)
    data = switch_variants(data, given, ServiceConfig)
    for key, value in parsed:
        set_dotted(data, key, value)
    return validate_config(data)


def validate_config(data: Mapping[str, Any]) -> ServiceConfig:
    """ServiceConfig from plain data; the first problem becomes a one-line ConfigError."""
    try:
        return ServiceConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(describe_error(ServiceConfig, errors[0]) + more) from None


def parse_override(override: str) -> tuple[str, Any]:
    """('dotted.key', value) from 'dotted.key=value' for a ServiceConfig key (`config_sources.parse_override`).
    A key under its old section (`data.min_plies=2`) sets it where it is now (`task.min_plies`,
    `service.config_moved`)."""
    key, sep, raw = override.partition("=")
    if sep:
        override = f"{moved_override(key.strip())}={raw}"
    return _parse_override(override, ServiceConfig)


def check_key(key: str) -> None:
    """Raise ConfigError unless `key` names a ServiceConfig field (a section or a value)."""
    field_at(ServiceConfig, key)
