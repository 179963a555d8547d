"""A restored checkpoint's runtime record: what `auto` became is kept, what the config names is the config's."""

from __future__ import annotations

from actors.run.kept_runtime import KeptRuntime
from trainer.config import TrainerConfig

RECORD = {
    "precision": "bf16",
    "precision_reason": "auto: bf16 matmuls measured 2.6x fp32's on this CPU",
    "sampling_precision": "fp32",
    "sampling_precision_reason": "auto: the run computes in bf16, but on a CPU a model 128 wide decodes faster in fp32",
    "attention": "eager",
    "attention_reason": "auto: bf16 on a CPU",
    "linear_kernel": "onednn",
    "linear_kernel_reason": "auto: an AMD CPU with AVX-512",
    "torch_threads": 2,
    "sampling_threads": 1,
    "sampling_threads_from": "timed at start (auto)",
}


def test_every_setting_left_to_auto_becomes_what_the_continued_run_computed_with():
    kept = KeptRuntime.of_checkpoint({"step": 12, "runtime": RECORD})
    cfg = kept.trainer_config(TrainerConfig())
    assert (cfg.precision.dtype, cfg.sampling.dtype) == ("bf16", "fp32")
    assert (cfg.model.attn_implementation, cfg.model.linear_kernel) == ("eager", "onednn")
    assert (kept.torch_threads(None), kept.sampling_threads(None), kept.sampling_threads("auto")) == (2, 1, 1)
    record = kept.record_of(TrainerConfig(), None, "auto")
    assert (
        record["precision_reason"] == RECORD["precision_reason"]
    )  # the run's own reason, not "set in the config"
    assert record["sampling_threads_from"] == "timed at start (auto)" and record["kept_from_step"] == 12
    assert record["kept"] == [
        "attention", "linear_kernel", "precision", "sampling_precision", "sampling_threads", "torch_threads"
    ]  # fmt: skip


def test_a_setting_the_config_names_is_the_configs_on_a_resume_too():
    kept = KeptRuntime.of_checkpoint({"step": 3, "runtime": RECORD})
    named = TrainerConfig.model_validate(
        {"precision": {"dtype": "fp32"}, "model": {"linear_kernel": "torch"}}
    )
    cfg = kept.trainer_config(named)
    assert (cfg.precision.dtype, cfg.model.linear_kernel) == ("fp32", "torch")
    assert (cfg.sampling.dtype, cfg.model.attn_implementation) == ("fp32", "eager")  # still auto: kept
    assert (kept.torch_threads(4), kept.sampling_threads(2)) == (4, 2)
    record = kept.record_of(named, 4, 2)
    assert "precision_reason" not in record and "torch_threads" not in record["kept"]


def test_an_hf_model_keeps_what_it_has_and_an_old_checkpoint_keeps_nothing():
    kept = KeptRuntime.of_checkpoint({"step": 5, "runtime": RECORD})
    hf = TrainerConfig.model_validate({"model": {"source": "hf", "path": "/models/tiny"}})
    cfg = kept.trainer_config(hf)
    assert cfg.model.attn_implementation == "eager" and not hasattr(cfg.model, "linear_kernel")
    assert "linear_kernel" not in kept.record_of(hf, None, None)["kept"]
    assert KeptRuntime.of_checkpoint({"step": 5, "run_id": "r"}) is None  # written before checkpoints kept it
