"""Device-side metric accumulation."""

import pytest
import torch

from trainer.metrics import DeviceMetrics, PhaseTimer


def test_sums_means_and_numbers():
    m = DeviceMetrics()
    m.add("loss", torch.tensor(1.0), mean=True)
    m.add("loss", torch.tensor(3.0), mean=True)
    m.add("skipped", torch.tensor(1.0))
    m.add("skipped", torch.tensor(1.0))
    m.add("count", torch.tensor(5))  # integer tensors come back as floats
    m.add("lr", 0.5)
    assert m.to_host() == {"loss": 2.0, "skipped": 2.0, "count": 5.0, "lr": 0.5}


def test_set_replaces():
    m = DeviceMetrics()
    m.add("x", torch.tensor(1.0))
    m.set("x", torch.tensor(7.0))
    assert m.to_host() == {"x": 7.0}


def test_rejects_mixtures_and_non_scalars():
    m = DeviceMetrics()
    m.add("x", torch.tensor(1.0))
    with pytest.raises(ValueError, match="mixes"):
        m.add("x", 1.0)
    with pytest.raises(ValueError, match="scalar"):
        m.add("y", torch.ones(2))
    m.add("z", 1.0, mean=True)
    with pytest.raises(ValueError, match="mean"):
        m.add("z", 1.0)


def test_phase_timer_accumulates():
    t = PhaseTimer(torch.device("cpu"))
    with t.phase("a"):
        pass
    with t.phase("a", sync=False):
        pass
    assert set(t.seconds) == {"a"} and t.seconds["a"] >= 0
