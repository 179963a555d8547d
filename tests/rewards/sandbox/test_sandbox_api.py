"""The sandbox's API: results, statuses, files, stdin, limits, the command form, the async form."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle

import pytest

import rewards.sandbox as sandbox
from rewards.sandbox import (
    STATUSES,
    SandboxLimits,
    SandboxResult,
    run_command,
    run_python,
    run_python_async,
    sandbox_unavailable_reason,
)

pytestmark = pytest.mark.usefixtures("clean_after")


def test_statuses_and_limits_have_the_agreed_names_and_defaults():
    assert STATUSES == ("ok", "failed", "timeout", "memory", "output_limit", "killed", "sandbox_error")
    limits = SandboxLimits()
    assert (limits.wall_s, limits.cpu_s, limits.memory_mb, limits.processes) == (5.0, 5.0, 512, 16)
    assert (limits.file_size_mb, limits.open_files, limits.output_bytes) == (16, 64, 65536)
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.wall_s = 1.0
    with pytest.raises(ValueError, match="processes"):
        SandboxLimits(processes=0)
    with pytest.raises(ValueError, match="wall_s"):
        SandboxLimits(wall_s=0)
    assert sandbox_unavailable_reason() is None
    assert set(sandbox.__all__) >= {"run_python", "run_python_async", "SandboxLimits", "SandboxResult"}


def test_ok_program_gives_its_output_and_a_picklable_result():
    result = run_python("import sys\nprint(sum(range(10)))\nprint('note', file=sys.stderr)")
    assert (result.status, result.exit_code, result.stdout, result.stderr) == ("ok", 0, "45\n", "note\n")
    assert result.ok and result.detail == "" and result.seconds > 0  # its wall clock, whatever the machine
    assert isinstance(result, SandboxResult) and pickle.loads(pickle.dumps(result)) == result


def test_failures_carry_exit_code_and_a_one_line_detail():
    result = run_python("raise ValueError('bad answer')")
    assert (result.status, result.exit_code) == ("failed", 1)
    assert (
        "ValueError: bad answer" in result.stderr and result.detail == "exit code 1: ValueError: bad answer"
    )
    assert run_python("import sys; sys.exit(3)").exit_code == 3
    assert run_python("def broken(:\n").status == "failed"


def test_files_are_in_the_work_directory_which_is_cwd_and_importable():
    files = {"solution.py": "def answer():\n    return 42\n", "data/input.txt": "7 8\n"}
    source = (
        "import os, solution\n"
        "a, b = map(int, open('data/input.txt').read().split())\n"
        "print(os.getcwd(), solution.answer(), a * b, sorted(os.listdir('.')))\n"
    )
    result = run_python(source, files=files)
    assert result.stdout == "/sandbox 42 56 ['data', 'solution.py']\n", result


def test_stdin_is_the_programs_input():
    result = run_python("import sys; print(sys.stdin.read().upper())", stdin="abc\n" * 10000)
    assert result.status == "ok" and result.stdout == "ABC\n" * 10000 + "\n"
    assert run_python("import sys; print(repr(sys.stdin.read()))").stdout == "''\n"


def test_file_names_must_stay_inside_the_work_directory():
    for bad in ("/etc/passwd", "../escape.py", "", "a/../../b"):
        with pytest.raises(ValueError, match="relative paths"):
            run_python("pass", files={bad: "x"})


def test_non_utf8_output_is_replaced_not_raised():
    result = run_python("import sys; sys.stdout.buffer.write(b'\\xff\\xfeok')")
    assert result.status == "ok" and result.stdout.endswith("ok")


def test_output_is_capped_at_the_limit():
    result = run_python("print('y' * 5000)", limits=SandboxLimits(output_bytes=1000))
    assert result.status == "output_limit" and len(result.stdout) == 1000
    assert "more than 1000 bytes" in result.detail


def test_the_command_form_runs_a_command_with_the_same_result():
    result = run_command(["sh", "-c", "cat in.txt; echo err >&2; exit 4"], files={"in.txt": "hello\n"})
    assert (result.status, result.exit_code, result.stdout, result.stderr) == (
        "failed",
        4,
        "hello\n",
        "err\n",
    )
    assert run_command(["python", "-c", "print(6 * 7)"]).stdout == "42\n"
    assert run_command(["/no/such/binary"]).status == "failed"


def test_the_async_form_runs_executions_concurrently():
    async def both():
        return await asyncio.gather(run_python_async("print(1)"), run_python_async("print(2)", stdin=""))

    assert [r.stdout for r in asyncio.run(both())] == ["1\n", "2\n"]


def test_a_missing_sandbox_is_a_sandbox_error_not_an_exception():
    from rewards.sandbox import run as run_module

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_module, "sandbox_unavailable_reason", lambda *method: "bubblewrap is not installed")
        result = run_python("print(1)")
    assert (result.status, result.detail) == ("sandbox_error", "bubblewrap is not installed")


def test_executions_from_many_threads_keep_to_their_own_sandbox():
    from concurrent.futures import ThreadPoolExecutor

    source = "import os, sys\nprint(sys.stdin.read(), sorted(os.listdir('.')))"
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: run_python(source, stdin=str(i), files={f"f{i}": ""}), range(8)))
    assert [r.stdout for r in results] == [f"{i} ['f{i}']\n" for i in range(8)]
