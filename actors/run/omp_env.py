"""The OpenMP environment of a wait policy, without importing torch: the variables must be set
before the OpenMP runtime loads (with torch), so the places that set them cannot load it first."""

from __future__ import annotations

WAIT_POLICY_ENV: dict[str, dict[str, str]] = {
    "passive": {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"},  # GNU and Intel OpenMP
    "active": {"OMP_WAIT_POLICY": "ACTIVE"},
    "inherit": {},
}


def wait_policy_env(policy: str) -> dict[str, str]:
    """The environment variables that give OpenMP `policy` ('passive', 'active' or 'inherit')."""
    if policy not in WAIT_POLICY_ENV:
        raise ValueError(f"omp_wait_policy must be one of {sorted(WAIT_POLICY_ENV)}, got {policy!r}")
    return dict(WAIT_POLICY_ENV[policy])
