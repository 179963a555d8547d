"""`python -m service.client submit|status|wait|logs|stop|list`: the client on the command line.

Tables for people, `--json` for scripts. Exit codes:
  0 done; 1 `wait`/`stop --wait`: the run ended FAILED or STOPPED; 2 bad arguments;
  3 cannot reach the dashboard; 4 auth token missing or rejected; 5 no such run;
  6 `wait` timed out; 7 any other error from the cluster.
Errors are one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from service.client._client import DEFAULT_ADDRESS, TrainingClient
from service.client.errors import ClientError, ConnectionFailed, RunTimeout, Unauthorized, UnknownRun
from service.client.render import CLEAR_SCREEN, runs_table, status_table, watch_frame
from service.client.states import RunState, RunStatus
from service.presets import DEFAULT_PRESET, PRESET_NAMES
from service.progress import for_people

EXIT_OK, EXIT_RUN_NOT_SUCCEEDED, EXIT_USAGE = 0, 1, 2
EXIT_CODES: tuple[tuple[type[ClientError], int], ...] = (
    (ConnectionFailed, 3),
    (Unauthorized, 4),
    (UnknownRun, 5),
    (RunTimeout, 6),
    (ClientError, 7),
)


def default_address(env: Mapping[str, str] | None = None) -> str:
    """RAY_API_SERVER_ADDRESS, else RAY_ADDRESS when it is an http(s) URL, else the local dashboard."""
    env = os.environ if env is None else env
    for name in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"):
        value = env.get(name, "").strip()
        if value.startswith(("http://", "https://")):
            return value
    return DEFAULT_ADDRESS


def _add_connection_options(parser: argparse.ArgumentParser, *, on_subcommand: bool) -> None:
    # On subcommands the defaults are SUPPRESS, so an option given before the subcommand survives.
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if on_subcommand else value

    parser.add_argument(
        "--address", default=default(None), help=f"dashboard URL (default: env or {DEFAULT_ADDRESS})"
    )
    parser.add_argument("--token", default=default(None), help="auth token (default: RAY_AUTH_TOKEN, ...)")
    parser.add_argument(
        "--request-timeout", type=float, default=default(30.0), help="seconds per HTTP request (default 30)"
    )
    parser.add_argument("--json", action="store_true", default=default(False), help="print JSON for scripts")


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _add_submit(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    submit = commands.add_parser("submit", parents=[common], help="start a training run")
    submit.add_argument(
        "--preset", metavar="PRESET",
        help=f"one of {', '.join(PRESET_NAMES)} (the trainer's default, {DEFAULT_PRESET}, when omitted)",
    )  # fmt: skip
    submit.add_argument("--config", dest="config_file", help="YAML config inside the working dir")
    submit.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    submit.add_argument("--run-id", help="choose the run id (submitting it again returns the same run)")
    submit.add_argument(
        "--resume", metavar="RUN_ID",
        help="continue this stopped or failed run from its latest checkpoint, as a new job (its id is printed)",
    )  # fmt: skip
    submit.add_argument("--run-dir", help="run directory on the cluster (default: the trainer's)")
    submit.add_argument("--working-dir", default=".", help="code to upload (default: current directory)")
    submit.add_argument("--no-upload", action="store_true", help="upload nothing: the cluster has the code")
    submit.add_argument("--num-cpus", type=float, help="CPUs reserved for the driver process")
    submit.add_argument("--num-gpus", type=float, help="GPUs reserved for the driver process")
    submit.add_argument("--env", action="append", type=_key_value, default=[], metavar="KEY=VALUE")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m service.client",
        description="Submit, watch and stop training runs on a Ray cluster (via its dashboard).",
        epilog="exit codes: 0 ok, 1 run failed/stopped, 2 bad arguments, 3 unreachable, "
        "4 unauthorized, 5 unknown run, 6 wait timed out, 7 other cluster error",
    )
    _add_connection_options(parser, on_subcommand=False)
    common = argparse.ArgumentParser(add_help=False)
    _add_connection_options(common, on_subcommand=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_submit(commands, common)
    status = commands.add_parser("status", parents=[common], help="where a run stands")
    status.add_argument("run_id")
    status.add_argument(
        "--watch", nargs="?", const=2.0, type=float, metavar="SECONDS",
        help="refresh in place every SECONDS (default 2) until the run ends",
    )  # fmt: skip
    wait = commands.add_parser("wait", parents=[common], help="wait until a run ends")
    wait.add_argument("run_id")
    wait.add_argument(
        "--timeout", dest="wait_s", type=float, default=3600.0, help="give up after (default 3600 s)"
    )
    wait.add_argument("--poll", type=float, default=2.0, help="first poll interval in seconds")
    logs = commands.add_parser("logs", parents=[common], help="print a run's log")
    logs.add_argument("run_id")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")
    logs.add_argument(
        "--raw",
        action="store_true",
        help="also the [grpo-progress] records the client reads (hidden by default)",
    )
    stop = commands.add_parser("stop", parents=[common], help="stop a run (it checkpoints first)")
    stop.add_argument("run_id")
    stop.add_argument("--wait", type=float, metavar="SECONDS", help="then wait this long for it to end")
    commands.add_parser("list", parents=[common], help="this service's runs on the cluster")
    return parser


def _print(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2) if args.json else text)


def _print_final(args: argparse.Namespace, status: RunStatus) -> int:
    _print(args, status.to_dict(), status_table(status))
    return EXIT_OK if status.state is RunState.SUCCEEDED else EXIT_RUN_NOT_SUCCEEDED


def _resume(client: TrainingClient, args: argparse.Namespace) -> int:
    if args.preset or args.run_id:
        raise ValueError(
            "--resume: --preset and --run-id are not allowed; the run's saved config is the base"
        )
    job_id = client.resume(
        args.resume,
        overrides=args.overrides,
        config_file=args.config_file,
        run_dir=args.run_dir,
        working_dir=None if args.no_upload else args.working_dir,
        env_vars=dict(args.env),
        entrypoint_num_cpus=args.num_cpus,
        entrypoint_num_gpus=args.num_gpus,
    )
    _print(args, {"run_id": job_id, "resumes": args.resume, "address": client.address}, job_id)
    return EXIT_OK


def _submit(client: TrainingClient, args: argparse.Namespace) -> int:
    if args.resume:
        return _resume(client, args)
    run_id = client.submit(
        preset=args.preset,
        config_file=args.config_file,
        overrides=args.overrides,
        entrypoint_num_cpus=args.num_cpus,
        entrypoint_num_gpus=args.num_gpus,
        run_id=args.run_id,
        run_dir=args.run_dir,
        working_dir=None if args.no_upload else args.working_dir,
        env_vars=dict(args.env),
    )
    _print(args, {"run_id": run_id, "address": client.address}, run_id)
    return EXIT_OK


def _logs(client: TrainingClient, args: argparse.Namespace) -> int:
    if not args.follow:
        text = client.logs(args.run_id)
        shown = text if args.raw else "".join(for_people([text]))
        _print(args, {"run_id": args.run_id, "logs": text}, shown.rstrip("\n"))
        return EXIT_OK
    chunks = client.logs(args.run_id, follow=True)
    for chunk in chunks if args.raw else for_people(chunks):
        sys.stdout.write(chunk)
        sys.stdout.flush()
    return EXIT_OK


def _watch(client: TrainingClient, args: argparse.Namespace) -> int:
    """Redraw the status table in place (a terminal) or print one per poll (a pipe; JSON lines with
    --json) until the run ends."""
    if not args.watch > 0:
        raise ValueError(f"--watch: {args.watch!r} is not allowed; give seconds > 0")
    in_place = sys.stdout.isatty() and not args.json
    while True:
        status = client.status(args.run_id)
        if args.json:
            print(json.dumps(status.to_dict()), flush=True)
        else:
            frame = watch_frame(status, args.watch, time.strftime("%H:%M:%S"))
            sys.stdout.write((CLEAR_SCREEN if in_place else "") + frame + "\n")
            sys.stdout.flush()
        if status.state.is_terminal():
            return EXIT_OK
        time.sleep(args.watch)


def _stop(client: TrainingClient, args: argparse.Namespace) -> int:
    requested = client.stop(args.run_id)
    if args.wait is None:
        note = "stop requested" if requested else "the run had already ended"
        _print(args, {"run_id": args.run_id, "stop_requested": requested}, f"{args.run_id}: {note}")
        return EXIT_OK
    return _print_final(args, client.wait(args.run_id, timeout_s=args.wait))


def run_command(client: TrainingClient, args: argparse.Namespace) -> int:
    if args.command == "submit":
        return _submit(client, args)
    if args.command == "status":
        if args.watch is not None:
            return _watch(client, args)
        status = client.status(args.run_id)
        _print(args, status.to_dict(), status_table(status))
        return EXIT_OK
    if args.command == "wait":
        return _print_final(args, client.wait(args.run_id, timeout_s=args.wait_s, poll_s=args.poll))
    if args.command == "logs":
        return _logs(client, args)
    if args.command == "stop":
        return _stop(client, args)
    runs = client.list()
    _print(args, [run.to_dict() for run in runs], runs_table(runs))
    return EXIT_OK


def exit_code(error: ClientError) -> int:
    return next(code for kind, code in EXIT_CODES if isinstance(error, kind))


# Ray's SDK logs each file it leaves out of an upload and each closed log stream at INFO.
_CHATTY_RAY_LOGGERS = (
    "ray.dashboard.modules.dashboard_sdk",
    "ray.dashboard.modules.job.sdk",
    "ray._private.runtime_env.packaging",
)


def _fail(as_json: bool, message: str, code: int) -> int:
    """One line on stderr; with --json also `{"error", "exit_code"}` on stdout for scripts."""
    print(f"error: {message}", file=sys.stderr)
    if as_json:
        print(json.dumps({"error": message, "exit_code": code}))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse printed usage and its message on stderr
        code = exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
        if code and "--json" in argv:
            print(json.dumps({"error": "bad arguments (see usage on stderr)", "exit_code": code}))
        return code
    for name in _CHATTY_RAY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        client = TrainingClient(
            args.address or default_address(), token=args.token, timeout_s=args.request_timeout
        )
        return run_command(client, args)
    except ValueError as error:
        return _fail(args.json, str(error), EXIT_USAGE)
    except ClientError as error:
        return _fail(args.json, str(error), exit_code(error))
    except KeyboardInterrupt:
        return 130
