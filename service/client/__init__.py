"""Python client for the training service: submit, watch and stop runs on a Ray cluster.

    from service.client import TrainingClient
    client = TrainingClient("http://127.0.0.1:8265")   # token: argument, RAY_AUTH_TOKEN, ...
    run_id = client.submit(preset="smoke")
    status = client.wait(run_id, timeout_s=600)

`python -m service.client --help` is the same as a command line.
"""

from service.client._client import DEFAULT_ADDRESS, TrainingClient
from service.client.errors import (
    ClientError,
    ConnectionFailed,
    RequestFailed,
    RunTimeout,
    Unauthorized,
    UnknownRun,
)
from service.client.states import RunInfo, RunState, RunStatus

__all__ = [
    "DEFAULT_ADDRESS",
    "ClientError",
    "ConnectionFailed",
    "RequestFailed",
    "RunInfo",
    "RunState",
    "RunStatus",
    "RunTimeout",
    "TrainingClient",
    "Unauthorized",
    "UnknownRun",
]
