"""The peer section: skipped with a reason when the peer is not installed; its table and headlines
from the runs' own figures; the ablation's rows up to the shipped settings."""

from __future__ import annotations

import pytest

from bench import grpo_rows, peer
from bench.grpo import GRPOPlan
from bench.results import new_section
from trainer import precision


def test_peer_section_is_skipped_with_its_reason_when_not_installed(monkeypatch, tmp_path):
    monkeypatch.setattr(peer, "PEER_PYTHON", tmp_path / "no-python")
    section = peer.bench_peer(peer.PeerPlan(), GRPOPlan())
    assert section["status"] == "skipped" and "not installed" in section["error"]
    assert section["headline"] == dict.fromkeys(peer.HEADLINE)
    assert all("not installed" in section["headline_notes"][k] for k in peer.HEADLINE)


def test_peer_table_and_headlines_come_from_the_runs_in_tokens():
    runs = [
        {"completions_per_s": 100.0, "mean_completion_len": 64.0},
        {"completions_per_s": 140.0, "mean_completion_len": 64.0},
    ]
    ours = {
        peer.REFERENCE: {"completions_per_s": 300.0, "completion_tokens": 64.0, "tokens_per_s": 19200.0},
        peer.SHIPPED: {"completions_per_s": 400.0, "completion_tokens": 64.0, "tokens_per_s": 25600.0},
    }
    section = peer._fill(
        new_section("peer", peer.TITLE, owns=peer.HEADLINE), runs, ours, [200.0, 280.0, 260.0], 64
    )
    headline = section["headline"]
    assert headline["peer_completions_per_s"] == 120.0 and headline["peer_tokens_per_s"] == 120.0 * 64
    assert headline["grpo_tokens_per_s"] == 19200.0
    assert headline["tokens_vs_peer"] == pytest.approx(2.5)
    assert headline["tokens_vs_peer_default"] == pytest.approx(25600 / 7680)
    assert headline["hf_tokens_vs_peer"] == pytest.approx(260.0 * 64 / 7680)
    assert headline["hf_vs_peer"] == pytest.approx(260.0 / 120.0)
    rows = {r[0]: r for r in section["tables"][0]["rows"]}
    assert rows[peer.REFERENCE][1:5] == [300.0, 19200.0, 64.0, pytest.approx(2.5)]
    assert any(
        "fp32 reference: 2.50x the peer's tokens/s (target >= 2.5x: met)" in n for n in section["notes"]
    )
    assert any(
        "shipped settings: 3.33x the peer's tokens/s (target >= 3x: met)" in n for n in section["notes"]
    )


def test_the_peer_runs_through_the_fixed_length_wrapper(monkeypatch):
    seen = {}

    def fake_run(args, **kwargs):
        seen["args"] = args
        return type("P", (), {"returncode": 0, "stdout": '{"completions_per_s": 1.0}\n', "stderr": ""})()

    monkeypatch.setattr(peer.subprocess, "run", fake_run)
    assert peer._peer_run(peer.PeerPlan()) == {"completions_per_s": 1.0}
    args = seen["args"]
    assert args[1] == str(peer.FIXED_LENGTH) and args[2].endswith("trl_grpo_bench.py")
    assert args[args.index("--max-completion-length") + 1] == "64"


def test_shipped_rows_follow_the_wait_policy(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2"}))
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    placed = "+ reward placement as shipped (auto: measured per step, in process or on the pool)"
    # 2 trainer threads on 2 cores: OpenMP's own wait, decoding on both threads: only the placement
    monkeypatch.setattr("actors.run.omp_env.usable_cores", lambda: 2)
    rows, _, default = grpo_rows.shipped_rows("cpu", threads=2, unshipped=False)
    assert [r[0] for r in rows] == [placed] and default == placed and rows[0][2]["rewards"] == "auto"
    rows, notes, default = grpo_rows.shipped_rows("cpu", threads=1, unshipped=False)
    assert [r[0] for r in rows] == [
        "+ threads as shipped (2, OpenMP's own wait)",
        placed,
    ] and default == placed
    assert rows[0][2]["env"] == {} and rows[0][2]["threads"] == 2 and rows[0][2]["rewards"] == "pool"
    assert rows[1][2]["threads"] == 2  # each row keeps the ones before it
    assert any("no native bf16" in n for n in notes)
    # a passive wait where the trials run: the rule decodes a small model on one thread
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    rows, _, default = grpo_rows.shipped_rows("cpu", threads=2, unshipped=False)
    assert [r[0] for r in rows] == ["+ decode threads as shipped (one for a small decode step)", placed]
    assert rows[0][2]["sampling_threads"] == "rule" and default == placed
    # one core: one thread, so nothing to wait for and nothing to decode on fewer threads
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setattr("actors.run.omp_env.usable_cores", lambda: 1)
    rows, _, _ = grpo_rows.shipped_rows("cpu", threads=2, unshipped=False)
    assert [r[0] for r in rows] == ["+ threads as shipped (1, OpenMP's own wait)", placed]
    # a preset that streams every step to the pool, as the reference does: no placement row
    demo = {**grpo_rows.PRESETS["demo"], "pool": {**grpo_rows.PRESETS["demo"]["pool"], "placement": "pool"}}
    monkeypatch.setitem(grpo_rows.PRESETS, "demo", demo)
    assert placed not in [r[0] for r in grpo_rows.shipped_rows("cpu", threads=2, unshipped=False)[0]]


def test_shipped_rows_follow_the_hardware(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512_bf16", "amx_bf16"}))
    # the demo's model is narrower than AMX_MIN_WIDTH: bf16 is measured last and not shipped
    rows, notes, default = grpo_rows.shipped_rows("cpu", threads=1, unshipped=True)
    assert "bf16" not in default and any("128 wide" in n for n in notes)
    assert rows[-2][0].endswith("not shipped") and rows[-2][1]["model.compile"] is True
    assert rows[-1][0].startswith("+ bf16 autocast, not shipped") and rows[-1][1]["precision.dtype"] == "bf16"
    assert "bf16" not in str(grpo_rows.shipped_rows("cpu", threads=1, unshipped=False)[0])
    monkeypatch.setattr(precision, "AMX_MIN_WIDTH", 64)  # a model wide enough: bf16 is shipped
    rows, notes, default = grpo_rows.shipped_rows("cpu", threads=1, unshipped=True)
    by_name = {r[0]: r for r in rows}
    bf16 = next(n for n in by_name if "bf16 autocast" in n)
    assert by_name[bf16][1]["precision.dtype"] == "bf16" and default.startswith("+ reward placement")
    assert by_name[default][1]["precision.dtype"] == "bf16"  # compile is not shipped
    assert rows[-1][0].endswith("not shipped") and rows[-1][1]["model.compile"] is True
    assert [r[0] for r in grpo_rows.reference_rows()][-1] == grpo_rows.REFERENCE_ROW


@pytest.mark.e2e  # a whole (short) run of the peer's trainer
@pytest.mark.slow
def test_the_wrapper_makes_the_unchanged_peer_decode_every_completion_to_full_length():
    import json
    import subprocess
    import sys

    pytest.importorskip("trl")
    script = peer.PEER_DIR / "trl_grpo_bench.py"
    if not script.is_file():
        pytest.skip(f"no peer script at {script}")
    args = [sys.executable, str(peer.FIXED_LENGTH), str(script), "--steps", "3", "--warmup", "2"]
    args += ["--max-completion-length", "24", "--threads", "1"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["mean_completion_len"] == 24.0
