"""Ray's side of the service: `actors.pool` (the reward pool) and `actors.run` (one rank's run)."""
