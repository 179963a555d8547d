"""Run one section and survive its failure; assemble bench.json's object. No Ray here, so the CUDA rows
(`bench.cuda_rows`) use it on a machine where only torch and the pure packages are installed."""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from bench.machine import load_average
from bench.results import collect_headline, new_section

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


def run_section(
    name: str, titles: tuple[str, ...], owns: tuple[str, ...], fn: Callable[[], Any]
) -> list[dict[str, Any]]:
    """The sections `fn` produces, or one error section per title when it raises."""
    began = time.perf_counter()
    try:
        out = fn()
        sections = out if isinstance(out, list) else [out]
    except Exception as exc:  # one broken section must not lose the others' figures
        log.error("section %s failed:\n%s", name, traceback.format_exc())
        sections = []
        for title in titles:
            section = new_section(name, title, owns=owns)
            section["status"], section["error"] = "error", f"{type(exc).__name__}: {exc}".splitlines()[0]
            sections.append(section)
    for section in sections:
        section["elapsed_s"] = time.perf_counter() - began
        section["load_average_at_end"] = load_average()
    return sections


def bench_result(
    sections: list[dict[str, Any]], command: str, mode: str, info: dict[str, Any], began: float
) -> dict[str, Any]:
    """bench.json's object: the machine, the headline gathered from the sections, the sections."""
    headline, notes = collect_headline(sections)
    return {
        "schema": SCHEMA_VERSION,
        "command": command,
        "mode": mode,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "elapsed_s": time.perf_counter() - began,
        "machine": info,
        "load_average_at_end": load_average(),
        "headline": headline,
        "headline_notes": notes,
        "sections": sections,
    }
