"""The performance tables, measured side by side: `python -m bench [--quick] [--sections ...] --out DIR`
(`python -m service.bench` runs the same).

Sections: reward scoring (in process and through the pool), sampling (full recomputation against
the KV cache), a training step by numeric mode, a whole GRPO step split into its phases, the
ablation adding one optimisation at a time, the transformers policy, the TRL peer, reward cost,
the sandbox, the cost curve and multi-turn episodes. `bench.json` holds every figure, the machine
and a `headline` object; `bench.md` is the same as tables. `python -m bench.publish` merges runs
into `bench/results/<machine>.json` and writes the docs' tables from those files.

Nothing in the service imports this package.
"""
