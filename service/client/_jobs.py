"""Ray's JobSubmissionClient, given a request timeout and errors from `service.client.errors`.

Ray raises `AuthenticationError` for 401/403, `RuntimeError("Request failed with status
code N: ...")` for other HTTP errors, `ConnectionError` when its version check cannot
connect and `requests` exceptions otherwise; its log tail raises aiohttp's. `translate_errors`
maps all of them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import aiohttp
import ray
import requests
from ray.dashboard.modules.dashboard_sdk import SubmissionClient
from ray.exceptions import AuthenticationError
from ray.job_submission import JobSubmissionClient

from service.client.auth import Token
from service.client.errors import ClientError, ConnectionFailed, RequestFailed, Unauthorized, UnknownRun

_STATUS_CODE = re.compile(r"status code (\d{3})")
_OLD_RAY = "the Jobs API needs Ray 2.0 or later on the cluster."


class JobsApi(JobSubmissionClient):
    """JobSubmissionClient that talks to `address` and nowhere else, each request bounded by `timeout_s`.

    Ray's constructor lets RAY_API_SERVER_ADDRESS / RAY_ADDRESS win over its `address`
    argument, so a client named for one cluster would act on another: the base constructor is
    skipped for `SubmissionClient`'s, which takes the address as given, and the version checks
    Ray's would make follow. Ray's SDK sends its requests without a timeout, so a half-open SSH
    tunnel would hang a caller forever; `_do_request` forwards extra keyword arguments to
    `requests.request`.
    """

    def __init__(self, address: str, *, token: Token | None, timeout_s: float) -> None:
        self._request_timeout_s = timeout_s  # set first: the constructor already sends requests
        self._client_ray_version = ray.__version__
        SubmissionClient.__init__(self, address=address, headers=token.headers() if token else {})
        self._check_connection_and_version(min_version="2.0", version_error_message=_OLD_RAY)

    def _do_request(self, method: str, endpoint: str, **kwargs):  # type: ignore[override]
        kwargs.setdefault("timeout", self._request_timeout_s)
        return super()._do_request(method, endpoint, **kwargs)


def _runtime_error(error: RuntimeError, address: str, run_id: str | None) -> ClientError:
    message = str(error).strip()
    code_match = _STATUS_CODE.search(message)
    status_code = int(code_match.group(1)) if code_match else None
    if message.startswith("Version check returned 404"):
        return ConnectionFailed(address, what_answers(address))
    if run_id is not None and (status_code == 404 or "does not exist" in message):
        return UnknownRun(run_id, address)
    # Ray puts the server's whole traceback in the message: its last line says what went wrong.
    last_line = next((line for line in reversed(message.splitlines()) if line.strip()), message)
    return RequestFailed(address, last_line.strip().rstrip("."), status_code)


def what_answers(address: str, timeout_s: float = 5.0) -> str:
    """One phrase on the HTTP server at `address` that did not answer as a Ray dashboard."""
    try:
        response = requests.get(address + "/api/version", timeout=timeout_s)
    except requests.RequestException as error:
        return f"it stopped answering ({type(error).__name__})"
    server = response.headers.get("Server") or "an unnamed server"
    kind = response.headers.get("Content-Type", "no content type").split(";")[0]
    return (
        f"{server} answers HTTP there but is not a Ray dashboard "
        f"(/api/version gave {response.status_code}, {kind})"
    )


def _http_error(
    status: int, message: str, address: str, token: Token | None, run_id: str | None
) -> ClientError:
    if status in (401, 403):
        sent = token is not None and status == 403
        return Unauthorized(address, token_sent=sent, token_origin=token.origin if token else None)
    if status == 404 and run_id is not None:
        return UnknownRun(run_id, address)
    return RequestFailed(address, message, status)


@contextlib.contextmanager
def translate_errors(address: str, token: Token | None, run_id: str | None = None) -> Iterator[None]:
    """Re-raise Ray's and requests' exceptions from the block as `ClientError`s."""
    try:
        yield
    except ClientError:
        raise
    except AuthenticationError as error:
        # Ray words a 401 "Authentication required" and a 403 "Authentication failed".
        sent = token is not None and "Authentication required" not in str(error)
        raise Unauthorized(address, token_sent=sent, token_origin=token.origin if token else None) from error
    except aiohttp.ClientResponseError as error:  # the log tail's websocket handshake
        raise _http_error(error.status, error.message, address, token, run_id) from error
    except (aiohttp.ClientConnectionError, TimeoutError) as error:
        raise ConnectionFailed(address, f"{type(error).__name__}: {error}") from error
    except requests.Timeout as error:
        raise ConnectionFailed(address, "no answer within the request timeout") from error
    except (requests.ConnectionError, ConnectionError) as error:
        raise ConnectionFailed(address, "connection refused or host unreachable") from error
    except requests.JSONDecodeError as error:  # JSON expected, something else came back
        raise ConnectionFailed(address, what_answers(address)) from error
    except requests.RequestException as error:
        raise ConnectionFailed(address, f"{type(error).__name__}: {error}") from error
    except RuntimeError as error:
        raise _runtime_error(error, address, run_id) from error
    except (TypeError, KeyError, AttributeError, ValueError) as error:  # JSON of another shape
        raise ConnectionFailed(address, what_answers(address)) from error
