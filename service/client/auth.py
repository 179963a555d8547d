"""Which auth token the client sends, found the way Ray itself looks for one.

Order: the explicit argument, then `RAY_AUTH_TOKEN`, then the file named by
`RAY_AUTH_TOKEN_PATH`, then Ray's own token file `~/.ray/auth_token` (what
`ray get-auth-token --generate` writes). No token at all means no header: the cluster may
run without auth, and one that needs a token answers 401, reported as "auth token missing".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from service.client.errors import ClientError

TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"


@dataclass(frozen=True)
class Token:
    value: str
    origin: str  # where it came from, for error messages; never the token itself

    def __repr__(self) -> str:  # keep the secret out of logs and tracebacks
        return f"Token(origin={self.origin!r})"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.value}"}


def default_token_file() -> Path:
    return Path.home() / ".ray" / "auth_token"


def _read_token_file(path: Path, origin: str) -> Token:
    try:
        value = path.read_text().strip()
    except OSError as error:
        raise ClientError(f"{origin} cannot be read: {error.strerror or error}") from error
    if not value:
        raise ClientError(f"{origin} is empty; it should hold the cluster's auth token")
    return Token(value, origin)


def resolve_token(token: str | None = None, env: Mapping[str, str] | None = None) -> Token | None:
    """The token to send, or None when there is none anywhere.

    A token file named explicitly by RAY_AUTH_TOKEN_PATH must be readable (as in Ray, a
    broken one is an error, not a silent fallback); the default file is used only if present.
    """
    env = os.environ if env is None else env
    if token is not None and token.strip():
        return Token(token.strip(), "the token argument")
    if env.get(TOKEN_ENV, "").strip():
        return Token(env[TOKEN_ENV].strip(), TOKEN_ENV)
    if env.get(TOKEN_PATH_ENV, "").strip():
        path = Path(env[TOKEN_PATH_ENV]).expanduser()
        return _read_token_file(path, f"{TOKEN_PATH_ENV} file {path}")
    path = default_token_file()
    if path.is_file():
        return _read_token_file(path, f"token file {path}")
    return None
