"""Inductor's compile workers: a process that compiled can shut them down and go on."""

import threading

import pytest
import torch

from trainer.compile import compile_unsupported_reason, release_compile_workers


def _executor_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor") and not t.daemon}


@pytest.mark.skipif(compile_unsupported_reason("cpu") is not None, reason="no C++ compiler for inductor")
def test_compile_workers_are_released_and_compiling_again_works(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # a cold cache: kernels really compile
    with torch._inductor.config.patch(compile_threads=2):  # the pool even on one core
        _compile_release_and_compile_again()


def _compile_release_and_compile_again() -> None:
    # (monkeypatch.setattr on inductor's config module leaves the option hidden after undo)
    before = _executor_threads()
    torch._dynamo.reset()
    f = torch.compile(lambda x: torch.sin(x) * 2 + x.cos())
    x = torch.randn(64)
    torch.testing.assert_close(f(x), torch.sin(x) * 2 + x.cos())
    assert _executor_threads() - before, "compiling started no worker pool: nothing to check"
    release_compile_workers()
    assert not (_executor_threads() - before)
    torch._dynamo.reset()
    g = torch.compile(lambda x: torch.tanh(x) - x)
    torch.testing.assert_close(g(x), torch.tanh(x) - x)  # compiles again after the release
    release_compile_workers()
    assert not (_executor_threads() - before)
