import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Tiny matmuls: extra threads only add contention on a shared machine; results do not depend on it.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
