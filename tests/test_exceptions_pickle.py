"""Every exception of the project survives pickling (Ray sends a worker's exception back pickled;
one that cannot be rebuilt shows a second traceback instead of the first). Found by walking the
packages, so a new exception is covered the day it is written."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
from pathlib import Path

import pytest

from service.client.states import RunState, RunStatus
from service.run_lock import Owner

PACKAGES = ("rewards", "trainer", "actors", "service")
# Constructor arguments of the exceptions that take more than a message.
ARGS = {
    "EnvCallError": (("KeyError", "'board'", 0.25), {}),
    "ConnectionFailed": (("http://h:1", "refused"), {}),
    "RequestFailed": (("http://h:1", "bad", 500), {}),
    "RunTimeout": (("r1", 5.0, RunStatus("r1", RunState.RUNNING, step=3, total_steps=9)), {}),
    "Unauthorized": (("http://h:1",), {"token_sent": True, "token_origin": "RAY_AUTH_TOKEN"}),
    "UnknownRun": (("r1", "http://h:1"), {}),
    "UnknownCharacterError": (("\u2014", 3, "e4 \u2014", "abc"), {}),
    "RunDirBusy": ((Path("/runs/r1"), Owner("h", 12, 1.7e9, 1.7e9 + 5, "b", "raysubmit_1")), {}),
}


def project_exceptions() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in PACKAGES:
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
            try:
                module = importlib.import_module(info.name)
            except ImportError:  # an optional extra that is not installed
                continue
            for obj in vars(module).values():
                if (
                    inspect.isclass(obj)
                    and issubclass(obj, BaseException)
                    and obj.__module__ == module.__name__
                ):
                    found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[name] for name in sorted(found)]


EXCEPTIONS = project_exceptions()


def test_the_walk_finds_the_exceptions():
    names = {cls.__name__ for cls in EXCEPTIONS}
    assert {
        "ConfigError",
        "UnknownCharacterError",
        "ClientError",
        "RewardPoolError",
        "DataFileError",
    } <= names


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda cls: f"{cls.__module__}.{cls.__qualname__}")
def test_round_trips_through_pickle(cls: type[BaseException]):
    args, kwargs = ARGS.get(cls.__name__, (("something went wrong",), {}))
    error = cls(*args, **kwargs)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls and str(back) == str(error)
    assert {k: repr(v) for k, v in vars(back).items()} == {k: repr(v) for k, v in vars(error).items()}
