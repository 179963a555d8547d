"""What `submit` checks on this machine before a job is sent, with the driver's own preflight
(`service.preflight`): config relations, the data when its files are here, the rewards tried on
it, a transformers model whose folder is here (as `service.model_checks` checks it on the
driver), and where each user reward's module comes from, so that the cluster can import it too.

A module inside the uploaded working dir travels with it; one importable here from another folder
(on PYTHONPATH) is shipped with Ray's `py_modules`; an installed package is left to the cluster's
image or runtime env, as the project's own dependencies are; one that cannot be imported here is
refused, naming it (with no upload, the cluster's image is trusted to hold it).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from rewards.config import IMPORT_SPEC
from service.model_checks import check_hf_model, run_rows
from service.preflight import check_relations, check_run
from service.run_dir import TINY_MODEL_DIR


def preflight_here(cfg: Any, working_dir: Path | None) -> None:
    """The driver's checks that do not need the cluster; data and rewards only when the job runs on
    what is here: the current directory uploaded, every data file in it (else the driver checks
    them on the cluster)."""
    from service.tasks import TASKS, build_task
    from service.train import held_out_eval_pairs

    check_relations(cfg, driver=False)
    if (
        working_dir is None
        or Path.cwd().resolve() != working_dir
        or not TASKS[cfg.task.name].checked_at_submit
        or not all(Path(p).expanduser().is_file() for p in cfg.task.data_files())
    ):
        _check_model_here(cfg, [])  # the rows' fit and tokens are left to the driver, which has the data
        return
    task = build_task(cfg)
    eval_set = held_out_eval_pairs(task, cfg)
    train_pairs = task.training_pairs(lambda line: None)
    check_run(cfg, task, eval_set, train_pairs, driver=False)
    _check_model_here(cfg, run_rows(task, eval_set, train_pairs))


def _check_model_here(cfg: Any, rows: list[Any]) -> None:
    """An hf model in a folder on this machine is checked as the driver will check it (its path,
    remote code, chat template, LoRA's package, the prompts' fit, the data's tokens). A hub id or a
    folder only the cluster has is the driver's to check; so is the tiny model the run makes for itself."""
    if cfg.model.source != "hf" or not cfg.model.path:
        return
    path = Path(str(cfg.model.path)).expanduser()
    if path.name == TINY_MODEL_DIR or not path.is_dir():
        return
    check_hf_model(cfg, rows)


def _module_path(top: str) -> Path | None:
    """The directory of package `top`, or its single .py file; None when it cannot be imported here."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if locations:
        return Path(locations[0]).resolve()
    return Path(spec.origin).resolve() if spec.origin and spec.origin.endswith(".py") else None


def modules_to_ship(cfg: Any, working_dir: Path | None) -> list[str]:
    """Local paths for `py_modules`: each user reward's top-level package not inside `working_dir`.

    ValueError naming the module the cluster would not see."""
    if working_dir is None:
        return []
    shipped: list[str] = []
    for spec in cfg.reward.user:
        if not IMPORT_SPEC.match(spec.fn):
            continue  # a registered name: refused by the scorer itself
        top = spec.fn.split(":")[0].split(".")[0]
        path = _module_path(top)
        if path is None:
            raise ValueError(
                f"reward.user: {spec.fn!r}: module {top!r} cannot be imported on this machine, so it "
                "cannot be shipped to the cluster; put it in the working dir, install it here, or "
                "submit with --no-upload to a cluster whose image has it"
            )
        if path == working_dir or working_dir in path.parents:
            continue  # uploaded with the working dir
        if "site-packages" in path.parts or "dist-packages" in path.parts:
            continue  # an installed package: the cluster's image or runtime env installs it too
        if str(path) not in shipped:
            shipped.append(str(path))
    return shipped
