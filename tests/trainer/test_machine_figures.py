"""A figure of the machine that a choice depends on is measured once and kept for every later process."""

from __future__ import annotations

import json

import pytest

from trainer import machine_figures
from trainer.machine_figures import ENV, kept_figure, machine_key


@pytest.fixture
def figures_file(tmp_path, monkeypatch):
    path = tmp_path / "figures.json"
    monkeypatch.setenv(ENV, str(path))
    kept_figure.cache_clear()
    yield path
    kept_figure.cache_clear()


def _counting(value: float):
    calls = []

    def measure() -> float:
        calls.append(1)
        return value

    return measure, calls


def test_a_figure_is_measured_once_and_read_back_by_a_later_process(figures_file):
    measure, calls = _counting(2.4)
    value, source = kept_figure("speedup", measure)
    assert (value, len(calls)) == (2.4, 1) and "measured now, kept in" in source
    assert json.loads(figures_file.read_text())[machine_key()]["speedup"]["value"] == 2.4
    kept_figure.cache_clear()  # as a new process would start
    other, more_calls = _counting(2.6)  # what a second timing would have said
    value, source = kept_figure("speedup", other)
    assert (value, len(more_calls)) == (2.4, 0) and "kept in" in source and "measured on" in source


def test_another_machine_key_measures_its_own(figures_file, monkeypatch):
    measure, _ = _counting(2.4)
    kept_figure("speedup", measure)
    kept_figure.cache_clear()
    monkeypatch.setattr(machine_figures, "machine_key", lambda: "another CPU")
    other, calls = _counting(4.4)
    assert kept_figure("speedup", other)[0] == 4.4 and len(calls) == 1
    assert len(json.loads(figures_file.read_text())) == 2  # both machines' entries kept


def test_a_torn_file_counts_as_empty_and_off_keeps_nothing(figures_file, monkeypatch):
    figures_file.write_text('{"half": ')
    measure, calls = _counting(3.0)
    assert kept_figure("speedup", measure)[0] == 3.0 and len(calls) == 1
    assert json.loads(figures_file.read_text())[machine_key()]["speedup"]["value"] == 3.0
    kept_figure.cache_clear()
    monkeypatch.setenv(ENV, "off")
    measure, calls = _counting(1.5)
    value, source = kept_figure("speedup", measure)
    assert (value, len(calls), source) == (1.5, 1, "measured now (keeping is off)")


def test_an_unwritable_place_still_gives_the_measured_figure(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv(ENV, str(blocked / "figures.json"))  # its parent is a file
    kept_figure.cache_clear()
    measure, calls = _counting(2.0)
    value, source = kept_figure("speedup", measure)
    kept_figure.cache_clear()
    assert (value, len(calls)) == (2.0, 1) and "not kept" in source
