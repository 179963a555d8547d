"""A trainer worker's threads: torch's count and the OpenMP wait policy's environment."""

import pytest
import torch

from actors.run.threads import apply_threads, default_threads, usable_cores, wait_policy_env
from service.config import ScalingConfig


def test_wait_policies():
    assert wait_policy_env("passive") == {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}
    assert wait_policy_env("active") == {"OMP_WAIT_POLICY": "ACTIVE"}
    assert wait_policy_env("inherit") == {}
    with pytest.raises(ValueError, match="omp_wait_policy"):
        wait_policy_env("spin")
    assert ScalingConfig().omp_wait_policy == "passive" and ScalingConfig().torch_threads is None


def test_threads_default_to_the_cores_shared_among_the_node_workers():
    before = torch.get_num_threads()
    try:
        assert default_threads(1) == usable_cores()
        assert default_threads(10_000) == 1
        got = apply_threads(None, 1)
        assert got["torch_threads"] == torch.get_num_threads() == usable_cores()
        assert apply_threads(1, 1)["torch_threads"] == torch.get_num_threads() == 1
        assert "OMP_WAIT_POLICY" in got
    finally:
        torch.set_num_threads(before)
