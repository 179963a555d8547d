"""The preallocated cache layer holds exactly what transformers' DynamicLayer holds, without copying."""

import pytest
import torch

pytest.importorskip("transformers")

from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer  # noqa: E402

from trainer.policy.hf_cache import PreallocatedLayer, preallocate  # noqa: E402


def _kv(t: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(3, 2, t, 4), torch.randn(3, 2, t, 4)


def test_preallocated_layer_matches_dynamic_layer_step_by_step():
    torch.manual_seed(0)
    dynamic = DynamicLayer()
    prefix = _kv(5)
    dynamic.update(*prefix)
    grown = PreallocatedLayer(*prefix, max_len=9)
    buffer = grown.keys.untyped_storage().data_ptr()
    for t in (1, 1, 2):
        kv = _kv(t)
        want, got = dynamic.update(*kv), grown.update(*kv)
        for w, g in zip(want, got, strict=True):
            assert torch.equal(w, g)
        assert grown.get_seq_length() == dynamic.get_seq_length()
        assert grown.get_mask_sizes(1) == dynamic.get_mask_sizes(1)
    assert grown.keys.untyped_storage().data_ptr() == buffer  # written in place, never reallocated
    with pytest.raises(ValueError, match="overflows 9"):
        grown.update(*_kv(1))


def test_preallocate_turns_plain_dynamic_layers_only():
    cache = DynamicCache()
    cache.layers = [DynamicLayer(), DynamicSlidingWindowLayer(sliding_window=4), DynamicLayer()]
    for i in range(3):
        cache.update(*_kv(3), layer_idx=i)
    assert preallocate(cache, max_len=8) == 2
    assert [type(layer) for layer in cache.layers] == [
        PreallocatedLayer,
        DynamicSlidingWindowLayer,
        PreallocatedLayer,
    ]
    assert cache.get_seq_length(0) == 3
    with pytest.raises(ValueError, match="does not fit"):
        PreallocatedLayer(*_kv(5), max_len=4)
