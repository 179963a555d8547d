"""The command line without a cluster: arguments, defaults, tables, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ports import closed_port_address

from service.client import DEFAULT_ADDRESS, TrainingClient
from service.client.cli import build_parser, default_address, main
from service.client.render import runs_table, status_table
from service.client.states import RunInfo, RunState, RunStatus, timestamp

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, DEFAULT_ADDRESS),
        ({"RAY_ADDRESS": "http://head:8265"}, "http://head:8265"),
        ({"RAY_ADDRESS": "auto"}, DEFAULT_ADDRESS),  # not a dashboard URL
        ({"RAY_ADDRESS": "ray://head:10001"}, DEFAULT_ADDRESS),
        ({"RAY_API_SERVER_ADDRESS": "https://h:443", "RAY_ADDRESS": "http://x:1"}, "https://h:443"),
    ],
)
def test_default_address(env, expected):
    assert default_address(env) == expected


def test_connection_options_work_before_or_after_the_subcommand():
    parser = build_parser()
    before = parser.parse_args(["--address", "http://a:1", "--json", "status", "r1"])
    after = parser.parse_args(["status", "r1", "--address", "http://a:1", "--json"])
    plain = parser.parse_args(["status", "r1"])
    assert (before.address, before.json) == (after.address, after.json) == ("http://a:1", True)
    assert (plain.address, plain.json, plain.request_timeout) == (None, False, 30.0)


def test_submit_arguments_are_collected():
    args = build_parser().parse_args(
        ["submit", "--preset", "smoke", "--set", "a.b=1", "--set", "c=2", "--env", "K=V", "--run-id", "x"]
    )
    assert (args.preset, args.overrides, args.env, args.run_id) == (
        "smoke",
        ["a.b=1", "c=2"],
        [("K", "V")],
        "x",
    )


@pytest.mark.parametrize("address", ["ray://head:10001", "http://"])
def test_non_dashboard_addresses_are_refused(address):
    with pytest.raises(ValueError, match="dashboard URL"):
        TrainingClient(address)


def test_address_without_scheme_gets_http():
    assert TrainingClient("10.0.0.5:8265/").address == "http://10.0.0.5:8265"


def test_unreachable_dashboard_is_exit_3_with_one_line(capsys):
    address = closed_port_address()
    assert main(["list", "--address", address]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot reach the Ray dashboard at {address}" in err


def test_bad_input_is_exit_2_before_any_request(capsys):
    address = closed_port_address()  # would be exit 3 if a request were sent
    assert main(["submit", "--address", address, "--run-id", "bad id", "--working-dir", str(REPO)]) == 2
    assert "run_id 'bad id' is not allowed" in capsys.readouterr().err


def test_module_entry_point_runs():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.client",
            "list",
            "--address",
            closed_port_address(),
            "--request-timeout",
            "5",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 3 and out.stderr.startswith("error: cannot reach the Ray dashboard")


def test_status_table_shows_progress_metrics_and_error():
    status = RunStatus(
        run_id="r1",
        state=RunState.FAILED,
        phase="grpo",
        step=5,
        total_steps=20,
        metrics={"loss": 0.123456, "reward_mean": 0.5},
        error="exit code 1: boom",
        started_at=timestamp(1_700_000_000_000),
        ended_at=timestamp(1_700_000_090_000),
    )
    text = status_table(status)
    for expected in ("FAILED", "5/20 (25%)", "0.1235", "reward_mean", "1m30s", "exit code 1: boom"):
        assert expected in text
    assert "eta" not in text  # a finished run has no ETA


def test_runs_table_lists_runs_and_says_when_there_are_none():
    runs = [RunInfo("r1", RunState.RUNNING, "smoke", timestamp(1_700_000_000_000), None)]
    text = runs_table(runs)
    assert text.splitlines()[0].split() == ["RUN", "ID", "STATE", "PRESET", "STARTED", "ELAPSED"]
    assert "r1" in text and "RUNNING" in text and "smoke" in text
    assert runs_table([]) == "no training runs on this cluster"


def test_a_reader_that_closes_the_pipe_early_gets_no_traceback():
    """`python -m service.client status X | head`: the reader goes away before the output ends."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.client", "list", "--json", "--address", closed_port_address()],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()  # before the interpreter has started: its JSON line meets a closed pipe
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_submit_help_names_every_preset(capsys, monkeypatch):
    from service.presets import PRESET_NAMES

    monkeypatch.setenv("COLUMNS", "400")  # one line each: argparse may break a line at a hyphen
    with pytest.raises(SystemExit):
        build_parser().parse_args(["submit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"one of {', '.join(PRESET_NAMES)} (the trainer's default, demo, when omitted)" in text
