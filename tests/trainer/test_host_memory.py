"""A CPU trainer keeps freed memory for its next step (`trainer.host_memory`): a step's pattern of
buffers of a few MB, kept and freed again and again, stops faulting pages in."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

# In a process of its own: the setting is process-wide and cannot be undone.
SCRIPT = """
import resource, torch
from trainer.host_memory import configure_host_memory

def faults_of_a_step():
    began = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    kept = []
    for mb in (2, 8, 3, 8, 2, 8):  # a forward's activations, kept for the backward
        kept.append(torch.empty(mb << 18).fill_(1.0))
        torch.empty(4 << 18).fill_(1.0)  # a temporary
    while kept:  # the backward frees them, last first, writing gradients as it goes
        torch.empty(kept.pop().numel()).fill_(1.0)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - began

assert configure_host_memory(torch.device("cpu"))
assert not configure_host_memory(torch.device("meta"))
for _ in range(4):
    faults_of_a_step()
print(max(faults_of_a_step() for _ in range(5)))
"""


def test_a_steps_buffers_are_reused_without_page_faults():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True
    )
    # without the setting, glibc's own moving threshold faulted 4,064 pages a step here, every step
    assert int(out.stdout.split()[-1]) < 100
