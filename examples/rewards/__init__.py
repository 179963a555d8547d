"""Example user rewards that misbehave on purpose, to show what `python -m service.check_reward` and
a run's preflight report for each: slow, failing, sometimes failing, non-deterministic."""
