"""Token resolution: argument, RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, then ~/.ray/auth_token."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.client import ClientError
from service.client.auth import TOKEN_ENV, TOKEN_PATH_ENV, resolve_token


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """An empty home directory, so a developer's own ~/.ray/auth_token never leaks in."""
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def write_default_token(home: Path, value: str) -> Path:
    path = home / ".ray" / "auth_token"
    path.parent.mkdir()
    path.write_text(value + "\n")
    return path


def test_argument_wins_over_everything(home, tmp_path):
    write_default_token(home, "from-file")
    env = {TOKEN_ENV: "from-env", TOKEN_PATH_ENV: str(home / ".ray" / "auth_token")}
    token = resolve_token("  from-arg ", env)
    assert token.value == "from-arg" and token.origin == "the token argument"


def test_env_token_wins_over_token_files(home):
    write_default_token(home, "from-file")
    token = resolve_token(None, {TOKEN_ENV: "from-env\n"})
    assert (token.value, token.origin) == ("from-env", TOKEN_ENV)


def test_token_path_env_wins_over_the_default_file(home, tmp_path):
    write_default_token(home, "from-default-file")
    named = tmp_path / "cluster.token"
    named.write_text("from-named-file\n")
    token = resolve_token(None, {TOKEN_PATH_ENV: str(named)})
    assert token.value == "from-named-file" and str(named) in token.origin


def test_default_file_is_the_last_resort(home):
    path = write_default_token(home, "from-default-file")
    token = resolve_token(None, {})
    assert token.value == "from-default-file" and str(path) in token.origin


def test_no_token_anywhere_means_none(home):
    assert resolve_token(None, {}) is None
    assert resolve_token("", {TOKEN_ENV: "  "}) is None  # blank counts as unset, as in Ray


def test_unreadable_named_token_file_is_an_error_not_a_fallback(home, tmp_path):
    write_default_token(home, "from-default-file")
    with pytest.raises(ClientError, match="RAY_AUTH_TOKEN_PATH file .*missing.token.* cannot be read"):
        resolve_token(None, {TOKEN_PATH_ENV: str(tmp_path / "missing.token")})


def test_empty_token_file_is_an_error(home, tmp_path):
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    with pytest.raises(ClientError, match="is empty"):
        resolve_token(None, {TOKEN_PATH_ENV: str(empty)})


def test_token_is_sent_as_a_bearer_header_and_kept_out_of_repr(home):
    token = resolve_token("s3cret", {})
    assert token.headers() == {"Authorization": "Bearer s3cret"}
    assert "s3cret" not in repr(token)
