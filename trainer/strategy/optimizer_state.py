"""AdamW's state keyed by parameter names, so that a checkpoint loads whatever wraps the policy.

`torch.optim.Optimizer.state_dict()` numbers the parameters in the order the optimiser holds them;
`torch.distributed.checkpoint.state_dict` names them (the module's parameter names), which is what a
sharded policy saves. A checkpoint of either kind loads under either strategy: these convert between
the two for a policy that is not sharded (the same parameters in the same order, so the conversion
is exact).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _names_in_order(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The name of each parameter the optimiser holds, in its order (groups one after the other)."""
    name_of = {id(p): name for name, p in model.named_parameters()}
    names = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in name_of:
                raise ValueError("the optimiser holds a parameter that is not the model's")
            names.append(name_of[id(p)])
    return names


def is_named(state: dict[str, Any]) -> bool:
    """Whether an optimiser state dict keys its parameters by name (else by number)."""
    groups = state.get("param_groups") or []
    return any(isinstance(p, str) for g in groups for p in g.get("params", []))


def to_named(state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """A numbered optimiser state dict (`optimizer.state_dict()`) keyed by parameter names."""
    names = _names_in_order(model, optimizer)
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]
    return {"state": {names[i]: s for i, s in state["state"].items()}, "param_groups": groups}


def to_numbered(state: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """A named optimiser state dict numbered as `optimizer.state_dict()` numbers its parameters.

    `Optimizer.load_state_dict` pairs a group's saved parameters with its own by position, so each
    group lists its numbers in the optimiser's order, whatever order the names came in."""
    names = _names_in_order(model, optimizer)
    index = {name: i for i, name in enumerate(names)}
    groups, start = [], 0
    if len(state["param_groups"]) != len(optimizer.param_groups):
        raise ValueError(
            f"the checkpoint's optimiser has {len(state['param_groups'])} parameter groups, this one "
            f"{len(optimizer.param_groups)}"
        )
    for saved, own in zip(state["param_groups"], optimizer.param_groups, strict=True):
        mine = names[start : start + len(own["params"])]
        if set(saved["params"]) != set(mine):
            unknown = sorted(set(saved["params"]) ^ set(mine))
            raise ValueError(
                f"the checkpoint's optimiser state and the model differ in parameters {unknown[:3]}"
            )
        groups.append({**saved, "params": [index[n] for n in mine]})
        start += len(mine)
    return {"state": {index[n]: s for n, s in state["state"].items()}, "param_groups": groups}
