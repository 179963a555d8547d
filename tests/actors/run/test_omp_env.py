"""OpenMP's wait policy as `auto` chooses it: the trainer's own spin unless its threads outnumber the cores."""

import os

import pytest

from actors.run import omp_env
from actors.run.omp_env import resolve_wait_policy
from service.config import ScalingConfig

PASSIVE = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}


def _auto(workers: int, threads: int | None, cores: int, environ: dict | None = None):
    return resolve_wait_policy(
        "auto", workers_on_node=workers, torch_threads=threads, cores=cores, environ=environ or {}
    )


def test_auto_keeps_openmps_own_wait_while_the_trainer_threads_fit_the_cores():
    assert _auto(1, None, 2) == ({}, "auto: 2 trainer threads on 2 cores: OpenMP's own wait")
    assert _auto(2, None, 16) == ({}, "auto: 16 trainer threads on 16 cores: OpenMP's own wait")
    assert _auto(1, 1, 2)[0] == {}


def test_auto_is_passive_where_trainer_threads_outnumber_the_cores():
    assert _auto(2, 2, 2) == (PASSIVE, "auto: 4 trainer threads on 2 cores: passive")
    assert _auto(3, None, 2) == (
        PASSIVE,
        "auto: 3 trainer threads on 2 cores: passive",
    )  # one thread each at least
    assert _auto(1, 4, 2)[0] == PASSIVE


def test_auto_leaves_a_wait_policy_the_environment_already_has():
    assert _auto(2, 2, 2, {"OMP_WAIT_POLICY": "ACTIVE"}) == (
        {},
        "auto: OMP_WAIT_POLICY=ACTIVE from the environment",
    )


def test_a_named_policy_is_applied_as_named():
    env, why = resolve_wait_policy("passive", workers_on_node=1, torch_threads=None, cores=64, environ={})
    assert (env, why) == (PASSIVE, "scaling.omp_wait_policy=passive")
    assert resolve_wait_policy("inherit", workers_on_node=9, torch_threads=9, cores=1)[0] == {}
    with pytest.raises(ValueError, match="omp_wait_policy"):
        resolve_wait_policy("spin", workers_on_node=1, torch_threads=None)


def test_a_process_applies_its_policy_once_and_keeps_the_first_reason(monkeypatch):
    monkeypatch.setattr(omp_env, "_APPLIED", {})
    monkeypatch.setattr(omp_env, "usable_cores", lambda: 2)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("KMP_BLOCKTIME", raising=False)
    scaling = ScalingConfig(num_workers=2, torch_threads=2)
    first = omp_env.apply_wait_policy(scaling)
    assert (
        first == "auto: 4 trainer threads on 2 cores: passive" and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    )
    assert omp_env.apply_wait_policy(scaling) == first  # not "from the environment"


def test_on_a_cluster_joined_a_named_policy_goes_to_the_trainer_workers_and_auto_leaves_the_cluster_alone():
    env, why = omp_env.cluster_wait_policy(ScalingConfig(omp_wait_policy="passive"))
    assert env == PASSIVE and why == "scaling.omp_wait_policy=passive (the trainer workers' runtime_env)"
    env, why = omp_env.cluster_wait_policy(ScalingConfig())
    assert env == {} and why.startswith("auto: the cluster's environment")
