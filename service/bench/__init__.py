"""The performance table, measured side by side: `python -m service.bench [--quick] --out DIR`.

Sections: 1 reward scoring (in process and through the pool), 2 sampling (full recomputation vs
KV cache), 3 a training step by numeric mode, 4 a whole GRPO step split into its phases, 5 an
ablation adding one optimisation at a time. `bench.json` holds every figure and a `headline`
object; `bench.md` is the same as tables.
"""
