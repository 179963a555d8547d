"""A sampler actor for the digest test, importable by Ray workers: its weights stop reaching its
policy from version 1 on (`tests.trainer.apart_sampler.StaleCopy`)."""

from actors.sampling.worker import SamplerWorker
from tests.trainer.apart_sampler import StaleCopy


class StaleWorker(SamplerWorker):
    versioned_class = StaleCopy
