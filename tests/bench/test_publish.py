"""Measurements as data: a run's machine is named, result files are assembled from runs, and the
docs' benchmark tables are what the committed result files make (`python -m bench.publish`)."""

from __future__ import annotations

import json

import pytest

from bench import publish
from bench.docs_tables import README_KEYS, MarkerError, blocks, fill, shown_command
from bench.machine import cpu_features, machine_info, machine_kind, machine_label
from bench.result_file import ResultFileError, add_run, load_results, merge_run
from bench.results import HEADLINE_TARGETS, collect_headline, new_section, set_headline

XEON = {
    "vendor": "GenuineIntel",
    "family": 6,
    "model": 143,
    "stepping": 8,
    "model_name": "Intel(R) Xeon(R) Platinum 8480+",
    "flags": ["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"],
    "torch_capability": "AVX512",
}
EPYC = {
    **XEON,
    "vendor": "AuthenticAMD",
    "family": 25,
    "model": 17,
    "model_name": "AMD EPYC 9R14 96-Core Processor",
}
EPYC["flags"] = ["avx2", "fma", "avx512f", "avx512_bf16"]


def machine(cpu=XEON, gpu=None, torch="2.13.0"):
    info = {
        "cpu": cpu,
        "logical_cores": 2,
        "usable_cores": 2,
        "memory_gib": 23.5,
        "gpu": gpu,
        "versions": {"python": "3.11.7", "torch": torch, "ray": "2.60.0", "transformers": "5.24.0"},
        "thread_env": {},
        "load_average_at_start": [0.5, 0.5, 0.5],
    }
    return {"kind": machine_kind(info), **info}


def run(
    sections, info=None, command="python -m bench --sections x --out /tmp/o", started="2026-12-03T10:00:00"
):
    return {
        "schema": 1,
        "command": command,
        "mode": "full",
        "started_at": started,
        "elapsed_s": 60.0,
        "machine": info or machine(),
        "load_average_at_end": [1.0, 1.0, 1.0],
        "sections": sections,
    }


def section(name, title, key=None, value=None, status="ok"):
    s = new_section(name, title, owns=(key,) if key else ())
    s["tables"].append({"title": f"{title} table", "columns": ["row", "figure"], "rows": [["a", value]]})
    if key and status == "ok":
        set_headline(s, key, value)
    s["status"], s["error"] = status, None if status == "ok" else "RuntimeError: boom"
    return s


def test_the_machine_is_named_by_its_cpu_or_its_gpu():
    assert machine_kind(machine()) == "intel-xeon-platinum-8480-6-143"
    assert machine_kind(machine(EPYC)) == "amd-epyc-9r14-25-17"
    h200 = {"name": "NVIDIA H200", "memory_gib": 139.8, "capability": "9.0", "count": 1, "cuda": "13.0"}
    assert machine_kind(machine(gpu=h200)) == "nvidia-h200"
    assert (
        machine_label(machine())
        == "Intel Xeon Platinum 8480+ (family 6 model 143; AVX-512, AVX512-BF16, AMX), 2 cores"
    )
    assert machine_label(machine(gpu=h200)) == "NVIDIA H200 (139.8 GiB), 2 cores"
    assert cpu_features({"flags": ["avx2", "fma"]}) == ["AVX2"]


def test_this_machine_is_described_with_its_cpu_flags_and_versions():
    info = machine_info()
    assert info["kind"] == machine_kind(info)
    assert set(info["cpu"]["flags"]) <= {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                                          "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve"}  # fmt: skip
    assert {"python", "torch", "ray", "transformers"} <= set(info["versions"])


def test_a_later_run_replaces_the_sections_it_measured_and_its_failures_do_not():
    first, _ = merge_run(None, run([section("sampling", "2. Sampling", "kv_cache_speedup", 9.0),
                                    section("sandbox", "9. Sandbox", "sandbox_execs_per_s", 300.0)]))  # fmt: skip
    later = run(
        [section("sandbox", "9. Sandbox", "sandbox_execs_per_s", 320.0),
         section("sampling", "2. Sampling", "kv_cache_speedup", status="error"),
         section("reward", "1. Reward scoring", "pool2_vs_inprocess", 1.2)],
        command="python -m bench --sections sandbox sampling reward --out /tmp/p", started="2026-12-03T11:00:00",
    )  # fmt: skip
    merged, report = merge_run(first, later)
    assert [s["title"] for s in merged["sections"]] == ["1. Reward scoring", "2. Sampling", "9. Sandbox"]
    assert (
        merged["headline"]["sandbox_execs_per_s"] == 320.0 and merged["headline"]["kv_cache_speedup"] == 9.0
    )
    assert [s["run"] for s in merged["sections"]] == [1, 0, 1]  # each section names its run
    assert [r["started_at"] for r in merged["runs"]] == ["2026-12-03T10:00:00", "2026-12-03T11:00:00"]
    assert any("kept '2. Sampling'" in line for line in report)
    assert merged["headline_notes"]["mfu"] == "not measured on this machine"
    again, _ = merge_run(merged, run([section("sampling", "2. Sampling", "kv_cache_speedup", 10.0)]))
    assert (
        len(again["runs"]) == 2 and again["runs"][0]["started_at"] == "2026-12-03T11:00:00"
    )  # unused run dropped


def test_a_run_goes_only_into_its_own_machines_file(tmp_path):
    merged, _ = merge_run(None, run([section("sandbox", "9. Sandbox")]))
    with pytest.raises(ResultFileError, match="cannot go into the result file of 'intel-xeon"):
        merge_run(merged, run([section("sandbox", "9. Sandbox")], info=machine(EPYC)))
    older = run([section("sandbox", "9. Sandbox")])
    older["machine"].pop("kind")
    with pytest.raises(ResultFileError, match="no `kind`"):
        merge_run(None, older)
    out = tmp_path / "out"
    out.mkdir()
    (out / "bench.json").write_text(
        json.dumps(run([section("sandbox", "9. Sandbox", "sandbox_execs_per_s", 5.0)]))
    )
    path, _ = add_run(out, tmp_path / "results")
    assert path.name == "intel-xeon-platinum-8480-6-143.json"
    assert load_results(tmp_path / "results")[0]["headline"]["sandbox_execs_per_s"] == 5.0


def test_every_figure_of_the_generated_tables_names_its_machine():
    xeon, _ = merge_run(None, run([section("sandbox", "9. Sandbox", "sandbox_execs_per_s", 312.0)]))
    epyc, _ = merge_run(
        None, run([section("sandbox", "9. Sandbox", "sandbox_execs_per_s", 250.0)], machine(EPYC))
    )
    made = blocks([epyc, xeon])
    header = made["readme"].splitlines()[0]
    assert header.split(" | ")[1:3] == [machine_label(epyc["machine"]), machine_label(xeon["machine"])]
    row = next(line for line in made["headline"].splitlines() if "`sandbox_execs_per_s`" in line)
    assert row.split(" | ")[1:3] == ["250", "312"]
    assert len(made["readme"].splitlines()) == 2 + len(README_KEYS)
    assert len(made["headline"].splitlines()) == 2 + len(HEADLINE_TARGETS)
    sandbox = made["section:sandbox"]
    assert sandbox.index(machine_label(epyc["machine"])) < sandbox.index("250") < sandbox.index(
        machine_label(xeon["machine"])
    ) < sandbox.index("312")  # fmt: skip
    assert "`python -m bench --sections x`" in sandbox  # the command, without its output directory
    assert made["section:env"] == "*Not measured on any machine with a result file.*\n"


def test_marked_blocks_are_rewritten_and_unknown_ones_refused():
    page = "intro\n<!-- bench:readme -->\nold\n<!-- /bench:readme -->\nend\n"
    assert (
        fill(page, {"readme": "new\n"}) == "intro\n<!-- bench:readme -->\nnew\n<!-- /bench:readme -->\nend\n"
    )
    with pytest.raises(MarkerError, match="unknown benchmark block 'nope'"):
        fill("<!-- bench:nope -->\n<!-- /bench:nope -->\n", {"readme": ""})
    assert shown_command("python -m bench --out /tmp/x --sections a b") == "python -m bench --sections a b"
    assert shown_command("python -m bench --out=/tmp/x --quick") == "python -m bench --quick"


def test_the_committed_pages_are_what_the_committed_result_files_make():
    results = load_results()
    assert results, "bench/results/ holds no machine's result file"
    for page, text in publish.pages().items():
        assert page.read_text() == text, f"{page.name} is stale: run python -m bench.publish"
        for name in ("readme",) if page.name == "README.md" else ("machines", "headline"):
            assert f"<!-- bench:{name} -->" in text
    for result in results:  # each file as the merge makes it: the headline gathered from its sections
        headline, notes = collect_headline(result["sections"])
        assert result["headline"] == headline and result["headline_notes"].keys() == notes.keys()
        assert sorted({s["run"] for s in result["sections"]}) == list(range(len(result["runs"])))
