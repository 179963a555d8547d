"""Errors the training client raises, one class per thing a caller can act on.

    ClientError             base class; raised as itself for a bad local setup
    │                       (e.g. RAY_AUTH_TOKEN_PATH names a file that cannot be read)
    ├── ConnectionFailed    the dashboard cannot be reached: wrong address, cluster down,
    │                       SSH tunnel closed, or no answer within the request timeout
    ├── Unauthorized        the cluster refused the request: auth token missing (none was
    │                       sent) or rejected (the one sent is wrong); `.token_sent` says which
    ├── UnknownRun          the cluster has no run with that id (`.run_id`)
    ├── RunTimeout          `wait()` gave up before the run ended (`.status`: the last one seen)
    └── RequestFailed       the Jobs API answered with an error none of the above covers
                            (`.status_code` when known); its text is the cluster's

Every message is one line that names the address or run it is about, so a CLI can print
`str(error)` as is. Ray's own exception stays attached as `__cause__`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.client.states import RunStatus

__all__ = [
    "ClientError",
    "ConnectionFailed",
    "RequestFailed",
    "RunTimeout",
    "Unauthorized",
    "UnknownRun",
]


class ClientError(Exception):
    """Base of every error the training client raises.

    Subclasses take their own constructor arguments, which pickling would replay as the message
    alone: `__reduce__` rebuilds the message and the attributes instead, so an error survives
    pickling (Ray, multiprocessing) whatever its constructor takes.
    """

    def __reduce__(self):
        return (_rebuild, (type(self), self.args, self.__dict__.copy()))


def _rebuild(cls: type[ClientError], args: tuple, state: dict) -> ClientError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class ConnectionFailed(ClientError):
    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"cannot reach the Ray dashboard at {address}: {reason}")
        self.address = address


class Unauthorized(ClientError):
    def __init__(self, address: str, *, token_sent: bool, token_origin: str | None = None) -> None:
        if token_sent:
            detail = "auth token rejected"
            if token_origin:
                detail += f" (the token came from {token_origin})"
            hint = "use the token printed by `ray get-auth-token` on the head node"
        else:
            detail = "auth token missing"
            hint = "pass --token, set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH, or put it in ~/.ray/auth_token"
        super().__init__(f"the cluster at {address} refused the request: {detail}; {hint}")
        self.address = address
        self.token_sent = token_sent


class UnknownRun(ClientError):
    def __init__(self, run_id: str, address: str) -> None:
        super().__init__(f"no run {run_id!r} on the cluster at {address}")
        self.run_id = run_id


class RunTimeout(ClientError):
    def __init__(self, run_id: str, timeout_s: float, status: RunStatus) -> None:
        super().__init__(
            f"run {run_id!r} still {status.state.value} after waiting {timeout_s:g}s"
            + (f" (step {status.step}/{status.total_steps})" if status.step is not None else "")
        )
        self.run_id = run_id
        self.status = status


class RequestFailed(ClientError):
    def __init__(self, address: str, message: str, status_code: int | None = None) -> None:
        super().__init__(f"the Jobs API at {address} answered with an error: {message}")
        self.address = address
        self.status_code = status_code
