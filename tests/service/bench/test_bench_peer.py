"""The peer section: skipped with a reason when the peer is not installed; its table and headlines
from the runs' own figures; the ablation's rows up to the shipped settings."""

from __future__ import annotations

import pytest

from service.bench import grpo_rows, peer
from service.bench.grpo import GRPOPlan
from service.bench.results import new_section
from trainer import precision


def test_peer_section_is_skipped_with_its_reason_when_not_installed(monkeypatch, tmp_path):
    monkeypatch.setattr(peer, "PEER_PYTHON", tmp_path / "no-python")
    section = peer.bench_peer(peer.PeerPlan(), GRPOPlan())
    assert section["status"] == "skipped" and "not installed" in section["error"]
    assert section["headline"] == {"peer_completions_per_s": None, "hf_vs_peer": None}
    assert all("not installed" in section["headline_notes"][k] for k in peer.HEADLINE)


def test_peer_table_and_headlines_come_from_the_runs():
    runs = [
        {"completions_per_s": 100.0, "mean_completion_len": 42.0},
        {"completions_per_s": 140.0, "mean_completion_len": 40.0},
    ]
    ours = {
        "built-in GPT, fp32 reference": {"completions_per_s": 300.0, "completion_tokens": 60.0},
        "built-in GPT, shipped settings": {"completions_per_s": 500.0, "completion_tokens": 60.0},
    }
    section = peer._fill(
        new_section("peer", peer.TITLE, owns=peer.HEADLINE), runs, ours, [200.0, 280.0, 260.0]
    )
    assert section["headline"]["peer_completions_per_s"] == 120.0
    assert section["headline"]["hf_vs_peer"] == pytest.approx(260.0 / 120.0)
    rows = {r[0]: r for r in section["tables"][0]["rows"]}
    assert rows["built-in GPT, fp32 reference"][2] == pytest.approx(2.5)
    assert any("2.50x the peer (target >= 2.5x: met)" in n for n in section["notes"])
    assert any("shipped settings: 4.17x the peer (target >= 4x: met)" in n for n in section["notes"])


def test_shipped_rows_follow_the_hardware(monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2"}))
    rows, notes, default = grpo_rows.shipped_rows("cpu", threads=1, unshipped=False)
    names = [r[0] for r in rows]
    assert names[0].startswith("+ threads as shipped") and default == names[-1]
    assert rows[0][2]["env"]["OMP_WAIT_POLICY"] == "PASSIVE"
    if grpo_rows.shipped_settings("cpu")["torch_threads"] > 1:  # decoding's threads by the shipped rule
        assert names[1] == "+ decode threads as shipped (one for a small decode step)" and len(names) == 2
        assert rows[1][2]["sampling_threads"] == "rule" and rows[1][2]["env"] == rows[0][2]["env"]
    assert any("no native bf16" in n for n in notes)
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512_bf16", "amx_bf16"}))
    rows, notes, default = grpo_rows.shipped_rows("cpu", threads=1, unshipped=True)
    by_name = {r[0]: r for r in rows}
    bf16 = next(n for n in by_name if "bf16 autocast" in n)
    assert by_name[bf16][1]["precision.dtype"] == "bf16" and default == bf16  # compile is not shipped
    assert rows[-1][0].endswith("not shipped") and rows[-1][1]["model.compile"] is True
    assert [r[0] for r in grpo_rows.reference_rows()][-1] == grpo_rows.REFERENCE_ROW
