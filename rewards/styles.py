"""Reward functions written for TRL or verl, called here as those trainers call them.

`reward.user[].style` says how a user reward is called (read once, when it is resolved):
- `item`: once per item, `fn(completion, target)`, or by name (`rewards.signature`).
- `trl`: once per batch of items (the items of one scoring call, in order: a prompt's completions
  side by side), with lists, as TRL's GRPOTrainer calls a reward function:

      fn(prompts=[...], completions=[...], trainer_state=None, log_extra=..., log_metric=...,
         **{column: [...]})

  The function gets the arguments it names, or all of them with `**kwargs`; each row field is a
  column (a list, one entry per item), and so is `target`. A completion is its text, or
  `[{"role": "assistant", "content": text}]` when the item's prompt is a list of chat messages
  (TRL's conversational data). It returns one float per item; None marks that item `skipped`; a
  list of the wrong length, a value that is not a finite number, or a raise marks every item of
  the call `error`. `log_extra(column, values)` values go to their items' results (`info`,
  under LOG_EXTRA) and `log_metric(name, value)` values are summed by name (`RewardLog`), as a
  step's records show them. `completion_ids` are each completion's sampled token ids (up to and including
  EOS, as TRL gives them): a run whose rewards take them sends them with every item, in the
  item's row under that name (TOKEN_IDS); other styles never see that field.
- `verl`: once per item, `fn(data_source=..., solution_str=completion, ground_truth=target,
  extra_info=...)`, as verl's reward manager calls `compute_score`; it returns a float, or a dict
  whose `score` is the reward (its other numeric keys are recorded).
- `auto` (the default): item when a parameter is named `completion`; trl when one is named
  `completions` or `completion_ids`; verl when one is named `solution_str`, `ground_truth` or
  `data_source`; else item (positionally).
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rewards.reward_log import RewardLog
from rewards.signature import (
    COMPLETION,
    POSITIONAL,
    TARGET,
    RewardParams,
    RewardSignatureError,
    reward_params,
)

AUTO, ITEM, TRL, VERL = "auto", "item", "trl", "verl"
PROMPT = "prompt"  # the item field holding the prompt (text, or a list of chat messages)
TRL_GIVEN = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
TRL_MARKS = ("completions", "completion_ids")
TOKEN_IDS = "completion_ids"  # the row field holding an item's sampled token ids, when the run sends them
VERL_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
GUIDE = "docs/guides/coming-from-trl-verl.md"
STYLES = (
    "a reward is fn(completion, target) (item), TRL's fn(completions, **kwargs) -> list (trl) or verl's "
    "compute_score(data_source, solution_str, ground_truth, extra_info=None) (verl)"
)


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        signature = inspect.signature(fn.__call__ if inspect.isclass(fn) else fn)
    except (TypeError, ValueError):  # builtins and some C callables
        return None
    if inspect.isclass(fn):  # a class reward: its objects are called, so `self` is not an argument
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    return signature


def _show(signature: inspect.Signature) -> str:
    """'(completions, **kwargs)': the parameters without annotations or defaults."""
    kinds = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return "(" + ", ".join(kinds.get(p.kind, "") + p.name for p in signature.parameters.values()) + ")"


def read_style(fn: Callable[..., Any], style: str, name: str) -> RewardParams:
    """How `fn` is called under `style` (auto: read from its signature); RewardSignatureError, one
    line naming the rule and the fix, when the declared style does not fit the signature."""
    signature = _signature(fn)
    if signature is None:
        if style in (AUTO, ITEM):
            return POSITIONAL
        raise RewardSignatureError(
            f"user reward {name!r}: style {style!r} needs a signature that can be read (a Python function "
            f"or class); set style: item to call it as fn(completion, target)"
        )
    params = signature.parameters
    trl_like = any(p in params for p in TRL_MARKS)
    verl_like = any(p in params for p in VERL_ARGS[:3])
    if style == AUTO:
        style = ITEM if COMPLETION in params else TRL if trl_like else VERL if verl_like else ITEM
    if style == TRL:
        return _trl_params(signature, name)
    if style == VERL:
        return _verl_params(signature, name)
    return _item_params(fn, signature, name, trl_like, verl_like)


def _item_params(
    fn: Callable[..., Any], signature: inspect.Signature, name: str, trl_like: bool, verl_like: bool
) -> RewardParams:
    if COMPLETION not in signature.parameters and (trl_like or verl_like):
        which = "TRL (completions: a list)" if trl_like else "verl (solution_str, ground_truth)"
        raise RewardSignatureError(
            f"user reward {name!r}: style: item calls fn(completion, target) once per item, but its "
            f"signature {_show(signature)} is {which}'s; set style: {TRL if trl_like else VERL} (or auto)"
        )
    params = reward_params(fn, name)
    if not params.by_name:
        try:
            signature.bind(None, None)
        except TypeError:
            raise RewardSignatureError(
                f"user reward {name!r}: fn{_show(signature)} cannot be called as fn(completion, target); {STYLES}: "
                f"name a parameter 'completion' (or 'completions' for TRL's style), or set reward.user[].style "
                f"(see {GUIDE})"
            ) from None
    return params


def _keyword_params(
    signature: inspect.Signature, name: str, style: str
) -> tuple[list[inspect.Parameter], bool]:
    """The parameters that can be given by name, and whether there is a **kwargs."""
    named, any_field = [], False
    for param in signature.parameters.values():
        if param.kind is param.VAR_KEYWORD:
            any_field = True
        elif param.kind is param.POSITIONAL_ONLY:
            raise RewardSignatureError(
                f"user reward {name!r}: parameter {param.name!r} is positional-only; style: {style} passes "
                f"every argument by name"
            )
        elif param.kind is not param.VAR_POSITIONAL:
            named.append(param)
    return named, any_field


def _trl_params(signature: inspect.Signature, name: str) -> RewardParams:
    named, any_field = _keyword_params(signature, name, TRL)
    given = [p.name for p in named if p.name in TRL_GIVEN]
    ids = next((p for p in named if p.name == TOKEN_IDS), None)
    if "completions" not in given and TOKEN_IDS not in given and not any_field:
        raise RewardSignatureError(
            f"user reward {name!r}: style: trl calls fn(prompts=[...], completions=[...], **columns) -> "
            f"list[float] once per batch, but fn{_show(signature)} takes no 'completions' (nor **kwargs); "
            f"add it, or set style: item (or auto)"
        )
    columns = [p for p in named if p.name not in TRL_GIVEN]
    required = [p.name for p in columns if p.default is p.empty]
    prompts = next((p for p in named if p.name == "prompts"), None)
    if prompts is not None and prompts.default is prompts.empty:
        required.append(PROMPT)
    if ids is not None and ids.default is ids.empty:
        required.append(TOKEN_IDS)
    fields = (PROMPT, *(p.name for p in columns if p.name not in (TARGET, PROMPT)))
    if any_field:
        given = list(TRL_GIVEN)
    return RewardParams(
        by_name=True,
        takes_target=any(p.name == TARGET for p in columns),
        fields=fields,
        required=tuple(required),
        any_field=any_field,
        style=TRL,
        given=tuple(given),
    )


def takes_token_ids(params: RewardParams) -> bool:
    """Whether a reward is called with `completion_ids` (a TRL-style one that names them or takes
    **kwargs): the run then sends each item's sampled token ids."""
    return params.style == TRL and TOKEN_IDS in params.given


def without_token_ids(row: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The row without the token ids the run may send (for the styles that do not take them)."""
    if row is None or TOKEN_IDS not in row:
        return row
    return {k: v for k, v in row.items() if k != TOKEN_IDS}


def _verl_params(signature: inspect.Signature, name: str) -> RewardParams:
    named, any_field = _keyword_params(signature, name, VERL)
    others = [p.name for p in named if p.name not in VERL_ARGS and p.default is p.empty]
    names = {p.name for p in named}
    if others or ("solution_str" not in names and not any_field):
        what = f"needs {others[0]!r}, which verl does not give" if others else "takes no 'solution_str'"
        raise RewardSignatureError(
            f"user reward {name!r}: style: verl calls compute_score(data_source, solution_str, ground_truth, "
            f"extra_info) once per item, but fn{_show(signature)} {what}; fix the signature or set style: item (or auto)"
        )
    given = VERL_ARGS if any_field else tuple(a for a in VERL_ARGS if a in names)
    truth = next((p for p in named if p.name == "ground_truth"), None)
    return RewardParams(
        by_name=True,
        takes_target="ground_truth" in given,
        fields=("data_source",) if "data_source" in given else (),
        required=(TARGET,) if truth is not None and truth.default is truth.empty else (),
        any_field="extra_info" in given,  # extra_info falls back on the row's other fields
        style=VERL,
        given=given,
    )


def _is_messages(prompt: Any) -> bool:
    return isinstance(prompt, list) and bool(prompt) and all(isinstance(m, Mapping) for m in prompt)


def trl_kwargs(
    params: RewardParams,
    completions: Sequence[str],
    targets: Sequence[Any],
    rows: Sequence[Mapping[str, Any] | None],
    log: RewardLog,
    name: str,
    extras: dict[str, list[Any]] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of one TRL-style call over these items; KeyError naming a required
    column an item lacks."""
    rows = [r or {} for r in rows]
    given = params.given
    kwargs: dict[str, Any] = {}
    if "completions" in given:
        if rows and all(_is_messages(r.get(PROMPT)) for r in rows):  # conversational, as TRL gives it
            kwargs["completions"] = [[{"role": "assistant", "content": c}] for c in completions]
        else:
            kwargs["completions"] = list(completions)
    if "prompts" in given:
        if all(PROMPT in r for r in rows):
            kwargs["prompts"] = [r[PROMPT] for r in rows]
        elif PROMPT in params.required:
            raise KeyError(PROMPT)
    if TOKEN_IDS in given:
        if all(TOKEN_IDS in r for r in rows):
            kwargs[TOKEN_IDS] = [list(r[TOKEN_IDS]) for r in rows]
        elif TOKEN_IDS in params.required:
            raise KeyError(TOKEN_IDS)
    if "trainer_state" in given:
        kwargs["trainer_state"] = None
    log_extra, log_metric = log.trl_callables(name, extras)
    if "log_extra" in given:
        kwargs["log_extra"] = log_extra
    if "log_metric" in given:
        kwargs["log_metric"] = log_metric
    if params.any_field:
        columns = list(dict.fromkeys(k for r in rows for k in r if k != PROMPT))
    else:
        columns = [f for f in params.fields if f != PROMPT]
    for column in columns:
        if column in kwargs:
            continue
        if column in params.required and any(column not in r for r in rows):
            raise KeyError(column)
        if any(column in r for r in rows):
            kwargs[column] = [r.get(column) for r in rows]
    if params.takes_target or params.any_field:
        if TARGET in params.required and any(t is None for t in targets):
            raise KeyError(TARGET)
        kwargs[TARGET] = list(targets)
    return kwargs


def trl_list(raw: Any, n: int) -> list[float | None]:
    """A TRL-style result as floats (None: not scored); ValueError saying what is wrong with it."""
    if hasattr(raw, "tolist") and not isinstance(raw, list | tuple):  # a numpy array or a tensor
        raw = raw.tolist()
    if not isinstance(raw, list | tuple):
        raise ValueError(f"returned {type(raw).__name__} {raw!r:.60}, not a list of {n} floats")
    if len(raw) != n:
        raise ValueError(f"returned {len(raw)} values for {n} completions")
    out: list[float | None] = []
    for i, value in enumerate(raw):
        if value is None:
            out.append(None)
        elif isinstance(value, numbers.Real) and math.isfinite(float(value)):
            out.append(float(value))
        else:
            raise ValueError(
                f"returned {type(value).__name__} {value!r:.60} for completion {i}, not a finite number"
            )
    return out


def verl_kwargs(
    params: RewardParams, completion: str, target: Any, row: Mapping[str, Any] | None, data_source: str
) -> dict[str, Any]:
    """The keyword arguments of one verl-style call; KeyError('target') when it needs a ground
    truth and the item has none."""
    row = row or {}
    given = params.given
    kwargs: dict[str, Any] = {}
    if "data_source" in given:
        kwargs["data_source"] = row.get("data_source") or data_source
    if "solution_str" in given:
        kwargs["solution_str"] = completion
    if "ground_truth" in given:
        if target is None and TARGET in params.required:
            raise KeyError(TARGET)
        if target is not None:
            kwargs["ground_truth"] = target
    if "extra_info" in given:
        extra = row.get("extra_info")
        if extra is None:
            extra = {k: v for k, v in row.items() if k not in ("data_source", "extra_info")}
        kwargs["extra_info"] = extra
    return kwargs


def verl_value(raw: Any) -> tuple[Any, dict[str, float]]:
    """(the reward, the other numeric keys) of a verl-style result: a number, or a dict with `score`."""
    if isinstance(raw, Mapping):
        if "score" not in raw:
            keys = ", ".join(map(str, raw)) or "none"
            raise ValueError(f"returned a dict without 'score' (keys: {keys})")
        extras = {
            str(k): float(v)
            for k, v in raw.items()
            if k != "score" and isinstance(v, numbers.Real) and not isinstance(v, bool)
        }
        return raw["score"], extras
    return raw, {}
