"""The Ray metric series the generated Grafana dashboard queries."""

import re

from service.dashboard import build_dashboard, queries

SERIES = re.compile(r"\bray_[a-z0-9_]+")


def dashboard_series() -> set[str]:
    return {name for expr in queries(build_dashboard()) for name in SERIES.findall(expr)}
