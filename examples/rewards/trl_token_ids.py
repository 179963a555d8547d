"""A reward of TRL's own that reads token ids, built as a TRL script builds it (needs `trl`):

    reward: {user: [{fn: "examples.rewards.trl_token_ids:overlong"}]}

`overlong` is DAPO's soft overlong punishment over each completion's `completion_ids` (up to and
including EOS): 0 up to 2 tokens, -0.5 at 3, -1 from 4 on.
"""

from trl.rewards import get_soft_overlong_punishment

overlong = get_soft_overlong_punishment(max_completion_len=4, soft_punish_cache=2)
