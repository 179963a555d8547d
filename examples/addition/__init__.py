"""Multi-digit addition: a JSONL generator, a reward that takes row fields by name, a run config."""
