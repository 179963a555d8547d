"""A run's report, drawn from its records alone (so any run directory, finished or not, can be redrawn).

python -m service.report runs/<run_id>
"""

from service.report.plot import write_report

__all__ = ["write_report"]
