"""`python -m service.train`: one GRPO run, from config to report.

    python -m service.train                                  # demo preset, embedded local Ray, CPU
    python -m service.train --preset smoke --run-dir /tmp/smoke
    python -m service.train --config my.yaml --set grpo.steps=80 --set sampling.temperature=0.8
    python -m service.train --run-dir runs/<run id> --resume  # continue from its latest checkpoint
    python -m service.train --preset smoke --run-dir /tmp/smoke --resume   # the same, as it was started
    python -m service.train --quiet | --verbose               # less or more on the console
    python -m service.train --plan --preset gpt2-4090        # each worker's memory, estimated; no run

On a terminal the console is a live progress bar with the evaluations above it; in a job log
(stdout not a terminal) it is a plain line every `run.log_interval_s` seconds, each with the
machine-readable record the client reads. Either way Ray's own chatter is filtered out unless
`--verbose` asks for it.

Exit status: 0 succeeded or stopped, 1 failed (summary.json says why), 2 bad config or
command line, or a run directory held by a live run (one line on stderr, no traceback).

A run directory has one writer: the driver holds its lock file (`service.run_lock`) from before
it writes anything until it exits, so a second start (or `--resume`) there is refused, naming the
live run; the lock of a run that was killed is taken over with a line saying whose it was. A run
that ended is continued with `--resume` (the refusal of a fresh start there quotes the command);
one that never took a step (its Ray did not start) holds nothing: the same command starts afresh.
"""

from __future__ import annotations

import argparse
import gc
import shlex
import sys
from collections.abc import Callable, Sequence

from actors.pool.config import PoolConfig
from actors.run.omp_env import apply_wait_policy
from service.config import ConfigError, ServiceConfig, config_to_yaml
from service.console import Verbosity, make_console
from service.loggers import missing_extras
from service.memory_plan import check_memory, print_plan, run_inputs
from service.model_checks import check_hf_model, prepare_model, run_rows
from service.preflight import check_run
from service.presets import DEFAULT_PRESET, PRESETS
from service.run_dir import claim_run, ephemeral_dir_warning, fresh_config, prepare_run_dir, resumed_config
from service.tasks import Task, build_task
from trainer.data.pairs import Pair

EXIT_BAD_CONFIG = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m service.train",
        description="GRPO post-training of a small GPT on Ray: SFT warm start, then GRPO with parallel CPU reward workers.",
    )
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), help=f"starting config (default: {DEFAULT_PRESET})"
    )
    parser.add_argument(
        "--config", metavar="FILE.yaml", help="YAML with any config sections, merged over the preset"
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="dotted.key=value",
        help="override one value (repeatable; the value is read as YAML), e.g. --set grpo.steps=100",
    )  # fmt: skip
    parser.add_argument("--run-dir", help="run directory (default: runs/<run id>)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir (or run.name) from its latest checkpoint (with --preset and "
        "--set: those that started it)",
    )
    parser.add_argument(
        "--plan", action="store_true",
        help="print the memory plan (each trainer worker's estimated peak under ddp and fsdp) and exit",
    )  # fmt: skip
    parser.add_argument(
        "--help-config", metavar="SECTION|KEY|NAME",
        help="print every key of one config section (type, default, presets, description), one key "
        "(grpo.beta), or every key of a name (temperature), and exit",
    )  # fmt: skip
    talk = parser.add_mutually_exclusive_group()
    talk.add_argument("--quiet", "-q", action="store_true", help="only warnings and the summary")
    talk.add_argument(
        "--verbose", "-v", action="store_true",
        help="every step, evaluation samples, checkpoints, the resolved config and Ray's own logs",
    )  # fmt: skip
    return parser


def _help_config(section: str) -> int:
    from service.config_reference import render_section

    try:
        print(render_section(section), flush=True)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_CONFIG
    except BrokenPipeError:  # read by a pager or `head` that stopped early: nothing more to say
        sys.stdout = None  # the interpreter's flush at exit would fail on the closed pipe again
    return 0


def verbosity_of(args: argparse.Namespace) -> Verbosity:
    if args.quiet:
        return Verbosity.QUIET
    return Verbosity.VERBOSE if args.verbose else Verbosity.NORMAL


def resolve(args: argparse.Namespace, argv: Sequence[str] | None = None) -> ServiceConfig:
    """The run's config: a fresh one, or with --resume the saved one (with --preset, the same
    command that started it must give it). argv: the command line, for a refusal to quote."""
    if args.resume:
        return resumed_config(args.config, args.overrides, args.run_dir, preset=args.preset)
    command = shlex.join(["python", "-m", "service.train", *(sys.argv[1:] if argv is None else argv)])
    return fresh_config(args.preset, args.config, args.overrides, args.run_dir, command=command)


def _bad_config(exc: Exception) -> int:
    print(f"config error: {exc}", file=sys.stderr, flush=True)
    return EXIT_BAD_CONFIG


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.help_config is not None:
        return _help_config(args.help_config)
    try:
        cfg = resolve(args, argv)
    except ConfigError as exc:
        return _bad_config(exc)
    if args.plan:
        return show_plan(cfg)
    console = make_console(
        verbosity_of(args), every_steps=cfg.run.log_every, interval_s=cfg.run.log_interval_s
    )
    if cfg.run.backend == "local" and "torch" not in sys.modules:
        # The loop runs in this process: its OpenMP must wait as the config says, and OpenMP reads
        # the policy once, when torch loads it (the preflight may), so it is set before anything.
        apply_wait_policy(cfg.scaling)
    try:
        task, eval_set, train_pairs, pool = preflight(cfg, console.header)
    except (ConfigError, ValueError) as exc:
        return _bad_config(exc)
    try:  # imported only now: a refused run never waits for torch and Ray to load
        from service.driver import RunDriver
    except ImportError as exc:  # e.g. Ray Train's own dependencies missing: say which, in one line
        print(f"cannot start: {exc}", file=sys.stderr, flush=True)
        return 1
    try:  # before anything is written to the directory: one writer per run directory
        lock = claim_run(cfg, resume=args.resume, log=console.warning)
    except ConfigError as exc:
        return _bad_config(exc)
    with lock:  # held until the driver has written its summary and let Ray go, however it ends
        try:
            prepare_policy(cfg, task, eval_set, train_pairs, console.header)
            run_dir = prepare_run_dir(cfg)
        except (ConfigError, ValueError) as exc:
            lock.abandon()  # a fresh directory made by the claim goes too
            return _bad_config(exc)
        cfg = cfg.model_copy(update={"pool": pool})  # chunks fitted to the reward's measured cost
        console.header(f"[train] run {cfg.run.name} in {run_dir}{' (resume)' if args.resume else ''}")
        if warning := ephemeral_dir_warning(run_dir):
            console.warning(warning)
        console.detail("[train] resolved config:\n" + config_to_yaml(cfg).rstrip())
        return RunDriver(cfg, task, eval_set, train_pairs, console).run()


def preflight(
    cfg: ServiceConfig, log: Callable[[str], None]
) -> tuple[Task, list[Pair], list[Pair] | None, PoolConfig]:
    """Everything that can refuse the run before anything starts (`service.preflight`): data problems
    (a ply range with too few held-out positions, an unreadable file, a bad row or one that cannot
    tokenize or fit, a reward that needs a field the rows lack), a logger without its package,
    config relations, and the rewards tried on the run's data. Raises ConfigError (one line).
    It writes nothing: the run directory is not claimed yet (`prepare_policy` comes after)."""
    if problems := missing_extras(cfg.logging):
        raise ConfigError(problems[0])
    task = build_task(cfg)
    eval_set = held_out_eval_pairs(task, cfg)
    check_memory(cfg, *run_inputs(cfg, task, eval_set))  # `service.memory_plan`: the run fits its devices
    train_pairs = task.training_pairs(log)
    pool = check_run(cfg, task, eval_set, train_pairs, driver=True, log=log)
    return task, eval_set, train_pairs, pool


def prepare_policy(
    cfg: ServiceConfig,
    task: Task,
    eval_set: list[Pair],
    train_pairs: list[Pair] | None,
    log: Callable[[str], None],
) -> None:
    """An hf run's model (made in the claimed run directory when it is the tiny one) and its
    tokenizer, checked before anything starts; nothing for a builtin run. Raises ConfigError."""
    if cfg.model.source == "hf":
        prepare_model(cfg, log)
        check_hf_model(cfg, run_rows(task, eval_set, train_pairs))


def show_plan(cfg: ServiceConfig) -> int:
    """`--plan`: the memory plan of the run the command describes (`service.memory_plan`)."""
    try:
        task = build_task(cfg)
        return print_plan(cfg, task, held_out_eval_pairs(task, cfg))
    except (ConfigError, ValueError) as exc:
        return _bad_config(exc)


def held_out_eval_pairs(task: Task, cfg: ServiceConfig) -> list[Pair]:
    """The task's held-out pairs; a data section that cannot give them is a config error."""
    try:
        return task.eval_pairs()
    except ValueError as exc:
        raise ConfigError(f"data.eval_size: {cfg.data.eval_size} is not allowed here; {exc}") from None


if __name__ == "__main__":
    status = main()
    # The interpreter's last garbage collection would walk every object torch, Ray and pydantic
    # made (about 0.6 s on a CPU core); the process is ending, so they are left to the system.
    gc.freeze()
    sys.exit(status)
