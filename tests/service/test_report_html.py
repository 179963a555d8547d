"""report.png's step-time split and report.html, opened in headless Chromium: it shows what the records hold."""

from __future__ import annotations

import io

import pytest
from headless import chromium_paths, headless_chromium

from actors.run.control import EVAL, START, STEP
from service.recorder import RunRecorder
from service.report import write_html_report, write_report
from service.report.boards import figures_by_length, plies_of
from service.report.html import fmt, pct, pool_section, render_html, rollouts_section, samples_section
from service.report.timing import step_time_split
from service.run_files import read_jsonl
from trainer.schedule import Schedule

START_FEN = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
AFTER_E4 = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1"
AFTER_E4_E5 = "rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - 0 2"


def _samples(good: bool) -> list[dict]:
    return [
        {"prompt": "e4", "target": AFTER_E4, "completion": AFTER_E4 if good else START_FEN,
         "reward": 1.0 if good else 0.6, "status": "ok"},
        {"prompt": "e4 e5", "target": AFTER_E4_E5, "completion": "rnbq<script>x", "reward": 0.1,
         "status": "unparsable"},
    ]  # fmt: skip


def _grpo(step: int) -> dict:
    return {"step": step, "phase": "grpo", "loss": -0.1, "reward_mean": 0.3 + step / 100, "kl": 0.01,
            "entropy": 1.5, "step_time_s": 1.0, "sample_s": 0.4, "reward_wait_s": 0.1, "ref_s": 0.2,
            "update_s": 0.25}  # fmt: skip


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "config.yaml").write_text("seed: 0\ntask:\n  name: fen\n")
    rec = RunRecorder(tmp_path, "html-run", Schedule(sft_steps=2, grpo_steps=3), out=io.StringIO())
    rec.handle(START, {"from_step": None, "world_size": 1})
    for step in (1, 2):
        rec.handle(STEP, {"step": step, "phase": "sft", "loss": 2.0 / step, "step_time_s": 0.3})
    rec.handle(EVAL, {"step": 2, "phase": "sft", "kind": "start", "exact_match": 0.0, "valid_rate": 0.5,
                      "reward_mean": 0.35, "count": 2, "samples": _samples(good=False)})  # fmt: skip
    for step in (3, 4, 5):
        rec.handle(STEP, _grpo(step))
    rec.handle(EVAL, {"step": 5, "phase": "grpo", "kind": "final", "exact_match": 0.5, "valid_rate": 0.5,
                      "reward_mean": 0.55, "count": 2, "samples": _samples(good=True)})  # fmt: skip
    rec.finish("succeeded", reports=lambda: [write_report(tmp_path).name, write_html_report(tmp_path).name])
    return tmp_path


def test_the_step_time_split_stacks_to_the_step_time(run_dir):
    split = step_time_split(read_jsonl(run_dir / "metrics.jsonl"))
    assert split.steps == [3, 4, 5]
    assert split.seconds["sample_s"] == [0.4] * 3 and split.seconds["other"] == pytest.approx([0.05] * 3)
    assert sum(split.mean_share().values()) == pytest.approx(1.0)
    assert (run_dir / "report.png").read_bytes()[:4] == b"\x89PNG"


def test_figures_by_game_length_come_from_the_record_or_from_its_samples():
    assert plies_of("1. e4 e5 2. Nf3") == 3 and plies_of("") is None
    rows, source = figures_by_length({"samples": _samples(good=True)})
    assert source == "the 2 sample completions kept"
    assert [(r.length, r.count, r.exact_match, r.valid_rate) for r in rows] == [
        ("1", 1, 1.0, 1.0),
        ("2", 1, 0.0, 0.0),
    ]
    recorded = {"by_plies": {"2": {"count": 8, "exact_match": 0.25}, "10": {"count": 4}}, "samples": []}
    rows, source = figures_by_length(recorded)
    assert (
        source == "all held-out positions" and [r.length for r in rows] == ["2", "10"] and rows[0].count == 8
    )


def test_the_page_is_self_contained_and_escapes_completions(run_dir):
    page = (run_dir / "report.html").read_text()
    assert "<script>" not in page and "rnbq&lt;script&gt;x" in page
    assert 'src="data:image/png;base64,' in page and "http" not in page.split("<style>")[0]


@pytest.mark.skipif(
    chromium_paths() is None, reason="needs chromium and chromium-driver (.ci/run installs them)"
)
def test_headless_chromium_renders_what_the_records_hold(run_dir, tmp_path_factory):
    evals = read_jsonl(run_dir / "eval.jsonl")
    with headless_chromium() as browser:
        browser.get((run_dir / "report.html").as_uri())
        page = browser.execute_script(
            """
            const cells = (table, field) => [...document.querySelectorAll(
                `table[data-table="${table}"] td[data-field="${field}"]`)].map(td => td.textContent);
            const img = document.querySelector('img.curves');
            return {
              title: document.querySelector('h1').textContent,
              status: cells('outcome', 'status')[0],
              evalSteps: cells('evaluations', 'step'), evalRewards: cells('evaluations', 'reward_mean'),
              evalExact: cells('evaluations', 'exact_match'),
              completions: cells('samples', 'completion'), rewards: cells('samples', 'reward'),
              statuses: cells('samples', 'status'),
              boardWidths: [...document.querySelectorAll('.boards svg')].map(s => s.getBoundingClientRect().width),
              notBoards: [...document.querySelectorAll('.boards p')].length,
              lengths: cells('by-length', 'length'),
              curves: img.complete ? img.naturalWidth : 0,
              config: document.querySelector('pre.config').textContent,
            };
            """
        )
        shot = tmp_path_factory.mktemp("shot") / "report.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    samples = [s for e in evals for s in e["samples"]]
    assert page["title"] == "GRPO run html-run" and page["status"] == "succeeded"
    assert page["evalSteps"] == [str(e["step"]) for e in evals]
    assert page["evalRewards"] == [fmt(e["reward_mean"]) for e in evals]
    assert page["evalExact"] == [pct(e["exact_match"]) for e in evals]
    assert page["completions"] == [s["completion"] for s in samples]
    assert page["rewards"] == [fmt(s["reward"]) for s in samples]
    assert page["statuses"] == [s["status"] for s in samples]
    # Every sample's target is a board; a completion is one when it parses (2 of the 4 do).
    assert len(page["boardWidths"]) == 4 + 2 and min(page["boardWidths"]) >= 100 and page["notBoards"] == 2
    assert page["lengths"] == ["1", "2", "1", "2"]  # by plies, first and last evaluation
    assert page["curves"] > 500 and "seed: 0" in page["config"]


def test_a_task_without_games_has_no_figures_by_game_length(run_dir):
    assert "Held-out figures by game length" in render_html(run_dir)
    (run_dir / "config.yaml").write_text("seed: 0\ntask:\n  name: text\n  path: rows.jsonl\n")
    page = render_html(run_dir)
    assert "game length" not in page and "by-length" not in page
    assert "Held-out evaluations" in page  # the task's own figures stay


def test_an_environments_infos_get_their_own_column_only_where_they_were_given():
    infos = [{"move": "e2e4", "cp_loss": 0}, {}]
    with_info = {"step": 4, "kind": "final", "phase": "grpo", "samples": [
        {"prompt": "p", "completion": "e4\n", "reward": 0.5, "status": "ok", "env_info": infos,
         "env_episode_info": {"moves": 1}},
        {"prompt": "q", "completion": "\n", "reward": 0.0, "status": "ok"},
    ]}  # fmt: skip
    without = {**with_info, "step": 2, "samples": [{"prompt": "p", "completion": "x", "status": "ok"}]}
    page = samples_section([without, with_info])
    tables = page.split('<table data-table="samples">')[1:]
    assert "info" not in tables[0] and 'data-field="env_info"' not in tables[0]
    assert tables[1].count("<th>environment&#x27;s info</th>") == 1
    assert tables[1].count('data-field="env_info"') == 2
    cell = "{&quot;cp_loss&quot;: 0, &quot;move&quot;: &quot;e2e4&quot;}\n{}\nepisode: {&quot;moves&quot;: 1}"
    assert f"<code>{cell}</code>" in tables[1]


def test_training_completions_show_the_first_and_last_recorded_steps():
    def row(step, sample, reward, in_loss):
        return {"step": step, "group": 0, "sample": sample, "prompt": "e4 <e5>", "completion": f"c{step}<{sample}>",
                "reward": reward, "status": "ok", "advantage": reward - 0.5, "in_loss": in_loss}  # fmt: skip

    rollouts = [row(s, i, i / 2, s > 3) for s in (3, 5, 7) for i in (0, 1)]
    page = rollouts_section(rollouts)
    assert (
        page.count('<table data-table="rollouts">') == 2 and "GRPO step 3" in page and "GRPO step 7" in page
    )
    assert "GRPO step 5" not in page and "c7&lt;1&gt;" in page and "c5" not in page
    assert '<td data-field="advantage" class=num>0.00</td>' in page  # a reward of 0.5 against the mean
    assert rollouts_section([]) == ""  # a run that recorded none has no section
    assert "<th>expected</th>" not in page  # no reward logged a column


def test_training_completions_show_the_columns_rewards_logged():
    rows = [{"step": 2, "group": 0, "sample": i, "prompt": "ab", "completion": "ba", "reward": 1.0, "status": "ok",
             "advantage": 0.0, "in_loss": False} for i in (0, 1)]  # fmt: skip
    rows[0]["log_extra"] = {"expected": "<ba>"}
    page = rollouts_section(rows)
    assert "<th>in loss</th><th>expected</th>" in page  # TRL's log_extra columns after the others
    assert '<td data-field="log_extra"><code>&lt;ba&gt;</code></td>' in page
    assert '<td data-field="log_extra">-</td>' in page  # the row it was not logged for


def test_an_autoscaled_pools_changes_are_a_table_of_the_steps_each_size_ran_for():
    rows = [{"step": s, "phase": "grpo", "pool_workers": 1.0} for s in range(7, 10)]
    rows += [
        {"step": 10, "phase": "grpo", "pool_workers": 3.0, "pool_resized_from": 1.0, "pool_resized_to": 3.0,
         "pool_resize_step": 8.0, "pool_resize_why": "wait share 0.85 above 0.2 (3 wanted by the measured cost)"},
        {"step": 11, "phase": "grpo", "pool_workers": 3.0},
        {"step": 12, "phase": "grpo", "pool_workers": 2.0, "pool_resized_from": 3.0, "pool_resized_to": 2.0,
         "pool_resize_step": 11.0, "pool_resize_why": "wait share 0.01 below 0.1 (2 wanted by the measured cost)"},
    ]  # fmt: skip
    section = pool_section(rows)
    assert section.count("<tr>") == 3  # the header and the two changes
    assert '<td data-field="steps">10-11</td>' in section and '<td data-field="steps">12-12</td>' in section
    assert "above 0.2" in section and "below 0.1" in section
    assert pool_section(rows[:3]) == ""  # a pool of fixed size: no section


def test_report_png_draws_an_autoscaled_pools_size_beside_the_wait_share_and_nothing_for_a_fixed_one():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from service.report.timing import draw_pool_size

    rows = [{"step": s, "phase": "grpo", "pool_workers": 1.0 if s < 5 else 3.0} for s in range(1, 9)]
    fig, ax = plt.subplots()
    draw_pool_size(ax, rows)
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "reward workers"
    [line] = fig.axes[1].get_lines()
    assert list(line.get_ydata()) == [r["pool_workers"] for r in rows]
    fixed, ax = plt.subplots()
    draw_pool_size(ax, [{**r, "pool_workers": 2.0} for r in rows])
    assert len(fixed.axes) == 1
    plt.close("all")
