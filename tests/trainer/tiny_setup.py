"""What the trainer tests share: the chess character tokenizer, four toy pairs, a small config
and a reward that counts matching characters."""

from trainer.config import TrainerConfig
from trainer.data.chess_games import CHESS_ALPHABET, Pair
from trainer.policy.char_tokenizer import CharTokenizer

CHESS_TOKENIZER = CharTokenizer(CHESS_ALPHABET)

PAIRS = [Pair(p, t) for p, t in [("e4", "ab"), ("d4", "cd"), ("c4", "ef"), ("Nf3", "gh")]]


def small_cfg(optim=None, **grpo) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "seed": 0,
            "sampling": {"group_size": 4, "max_new_tokens": 6, "prompts_per_microbatch": 2},
            "grpo": {"prompts_per_step": 4, **grpo},
            "optim": {"lr": 1e-3, **(optim or {})},
            # fp32 whatever the CPU: the tests compare numbers across paths (DDP, compile, resume)
            # that agree exactly only in fp32 (`auto` computes in bf16 on CPUs with AMX)
            "precision": {"dtype": "fp32"},
        }
    )


def char_match(completions, targets):
    """Fraction of target characters matched position by position."""
    return [
        sum(a == b for a, b in zip(c, t, strict=False)) / len(t)
        for c, t in zip(completions, targets, strict=True)
    ]
