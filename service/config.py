"""The service's one typed config, resolved once at the edge from a preset, a file and overrides.

    cfg = load_config("demo", config_file="my.yaml", overrides=["grpo.steps=80", "sampling.temperature=0.8"])

Sources, later wins: the preset (`service.presets.PRESETS`), the YAML file, then each
`dotted.key=value` override (the value is parsed as a YAML scalar). Every problem surfaces as a
`ConfigError` whose message is one line naming the dotted key, the value and what is allowed.
"""

from __future__ import annotations

import copy
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from actors.pool.config import PoolConfig
from actors.pool.node_resources import check_custom_resources, check_label_selector
from rewards import RewardConfig
from rewards.config import EngineConfig
from service.presets import DEFAULT_PRESET, PRESETS
from trainer.config import Frozen, TrainerConfig

# Run ids name a directory, Ray actors and metric tags: keep them to safe characters.
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")
_SHOULD = re.compile(r"^(Input|String|Value|List|Dictionary) should")
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


class ConfigError(ValueError):
    """A config that cannot be used; str() is one line naming the key, the value and what is allowed."""


class TaskConfig(Frozen):
    """Which task the run trains on (`service.tasks.TASKS`), and the keys of the tasks that read files.

    The `text` task reads prompts (and optional targets) from JSONL rows; a task refuses the keys
    it does not read (`Task.config_keys`), so a key set for another task is never silently ignored.
    """

    name: str = Field("fen", description="the task: its data, its scorer and its held-out figures")
    path: str | None = Field(None, description="text: JSONL file of training rows")
    eval_path: str | None = Field(
        None, description="text: JSONL file of held-out rows (default: data.eval_size prompts split off path)"
    )
    prompt_key: str = Field("prompt", min_length=1, description="text: the row key holding the prompt")
    target_key: str = Field(
        "target", min_length=1, description="text: the row key holding the target (optional in a row)"
    )
    stop: list[str] = Field(
        default_factory=list, description="text: strings that end a completion (besides EOS)"
    )
    engine: EngineConfig = Field(
        EngineConfig(),
        description="move: the chess engine judging moves (path, nodes, hash_mb, cp_scale, ...)",
    )
    train_positions: int = Field(
        2000, ge=1, description="move: distinct training positions (their engine moves are searched once)"
    )
    chat_template: bool = Field(
        False,
        description="model.source=hf: render each prompt as a user message through the tokenizer's chat "
        "template (instruct models)",
    )
    system: str | None = Field(None, description="with chat_template: a system message before each prompt")

    @field_validator("stop")
    @classmethod
    def _non_empty_stops(cls, value: list[str]) -> list[str]:
        if any(not s for s in value):
            raise ValueError(
                f"{value!r} holds an empty string; every stop string needs at least one character"
            )
        return value

    @field_validator("name")
    @classmethod
    def _known(cls, value: str) -> str:
        from service.tasks import TASKS  # the registry imports the tasks, which import this module's peers

        if value not in TASKS:
            raise ValueError(f"{value!r} is not a task; expected one of {_quoted(TASKS)}")
        return value


class ScalingConfig(Frozen):
    """The Ray Train worker group: one DDP rank per worker."""

    num_workers: int = Field(1, ge=1, description="trainer workers (DDP ranks)")
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
    omp_wait_policy: Literal["passive", "active", "inherit"] = Field(
        "passive",
        description="OpenMP threads between parallel regions: passive sleeps (OMP_WAIT_POLICY=PASSIVE, "
        "KMP_BLOCKTIME=0), active spins (fast alone, several times slower when another process wants the "
        "core), inherit leaves the environment as it is; set for a local cluster, put it in the job's "
        "runtime_env on a remote one",
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


class ServiceConfig(TrainerConfig):
    """Everything one run needs: the trainer's sections plus task, reward, pool, scaling, run and logging."""

    task: TaskConfig = TaskConfig()
    reward: RewardConfig = RewardConfig()
    pool: PoolConfig = PoolConfig()
    scaling: ScalingConfig = ScalingConfig()
    run: RunConfig = RunConfig()
    logging: LoggingConfig = LoggingConfig()

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
    def _check_task_keys(self) -> ServiceConfig:
        from service.tasks import check_task_config

        problem = check_task_config(self)
        if problem:
            raise ValueError(problem)
        return self

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
        raise ConfigError(f"preset: {preset!r} is not allowed; expected one of {_quoted(PRESETS)}")
    data = copy.deepcopy(PRESETS[preset])
    if config_file is not None:
        data = deep_merge(data, read_config_file(config_file))
    for override in overrides:
        key, value = parse_override(override)
        set_dotted(data, key, value)
    return validate_config(data)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A YAML mapping from `path` (ConfigError when it cannot be read or is not a mapping)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"--config {path}: not valid YAML{line}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of sections, got {type(data).__name__}")
    return data


def validate_config(data: Mapping[str, Any]) -> ServiceConfig:
    """ServiceConfig from plain data; the first problem becomes a one-line ConfigError."""
    try:
        return ServiceConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(describe_error(errors[0]) + more) from None


def parse_override(override: str) -> tuple[str, Any]:
    """('dotted.key', value) from 'dotted.key=value'; the value is read as YAML ('null', '8', '[1, 2]')."""
    key, sep, raw = override.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {override!r}: expected dotted.key=value, e.g. grpo.steps=100")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise ConfigError(f"{key}: {raw!r} is not a YAML value") from None
    check_key(key)
    if isinstance(value, str) and _FLOAT.match(value):
        value = float(value)  # YAML 1.1 reads '1e-3' as text; a config means the number
    if isinstance(value, int | float | bool) and _wants_string(key):
        value = raw.strip()  # run.name=2024 means the string '2024'
    return key, value


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """data[a][b][c] = value for key 'a.b.c', creating sections on the way."""
    parts = key.split(".")
    node = data
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            section = ".".join(parts[: depth + 1])
            raise ConfigError(f"{key}: {section} is a value, not a section")
        node = child
    node[parts[-1]] = value


def deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `base` with `over` merged in (nested mappings merge, everything else replaces)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# --------------------------------------------------------------------------- keys and messages


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (`X`, `X | None`), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _field_at(key: str) -> Any:
    """The FieldInfo that a dotted key names (ConfigError for an unknown key)."""
    model: type[BaseModel] | None = ServiceConfig
    parts = key.split(".")
    field = None
    for depth, part in enumerate(parts):
        if model is None and depth == len(parts) - 1 and _is_map(field):
            return field  # one entry of a map key, e.g. pool.resources.reward_node
        if model is None:
            raise ConfigError(f"{key}: {'.'.join(parts[:depth])} is a value, not a section")
        if part not in model.model_fields:
            section = ".".join(parts[:depth]) or "the top level"
            raise ConfigError(
                f"{key}: unknown key {part!r}; allowed keys of {section}: {', '.join(model.model_fields)}"
            )
        field = model.model_fields[part]
        model = _model_in(field.annotation)
    return field


def _is_map(field: Any) -> bool:
    return field is not None and typing.get_origin(field.annotation) is dict


def check_key(key: str) -> None:
    """Raise ConfigError unless `key` names a config field (a section or a value)."""
    _field_at(key)


def _wants_string(key: str) -> bool:
    annotation = _field_at(key).annotation
    args = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else ()
    )
    return annotation is str or str in args


def _quoted(values: Any) -> str:
    return ", ".join(repr(v) for v in values)


def _allowed_keys(loc: Sequence[Any]) -> str:
    model: type[BaseModel] | None = ServiceConfig
    for part in loc:
        if isinstance(part, int):  # an item of a list section: same model
            continue
        if model is None or part not in model.model_fields:
            return ""
        model = _model_in(model.model_fields[part].annotation)
    return ", ".join(model.model_fields) if model is not None else ""


def describe_error(error: Mapping[str, Any]) -> str:
    """One line for one pydantic error: 'dotted.key: value is not allowed; what is allowed'."""
    loc = [p for p in error["loc"] if p != "function-after"]
    key = ".".join(str(p) for p in loc) or "config"
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "extra_forbidden":
        section = ".".join(str(p) for p in loc[:-1]) or "the top level"
        return f"{key}: unknown key {loc[-1]!r}; allowed keys of {section}: {_allowed_keys(loc[:-1])}"
    if kind == "value_error":  # a model validator: the message names the fields itself
        message = str(ctx.get("error", error["msg"]))
        return f"{key}: {message}" if loc else message
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"{key}: {error['input']!r} is not allowed; expected a section (a mapping of keys)"
    if kind == "missing":
        return f"{key}: missing; this section needs it"
    if kind == "literal_error":
        allowed = str(ctx.get("expected", "")).replace(" or ", ", ")
        return f"{key}: {error['input']!r} is not allowed; expected one of {allowed}"
    return f"{key}: {error['input']!r} is not allowed; {_SHOULD.sub('must', error['msg'])}"
