"""The report writers: :mod:`~latentlens.reports.report` (``report.md`` and ``report.html``
from sections), :mod:`~latentlens.reports.demo` (the demo's runs and report) and
:mod:`~latentlens.reports.atlas` (the latent-code atlas of any model)."""

from latentlens.reports.report import Section, write_report

__all__ = ["Section", "write_report"]
