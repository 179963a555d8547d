"""A run's reports, drawn from its records alone (so any run directory, finished or not, can be redrawn).

python -m service.report runs/<run_id>      # report.png and report.html
"""

from service.report.html import write_html_report
from service.report.plot import load_plotting, write_report

__all__ = ["load_plotting", "write_html_report", "write_report"]
