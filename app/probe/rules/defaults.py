"""The probe's fixed settings: its baseline and CUSUM (see :mod:`app.probe.rules.drift`), the team
it is charged to and how long a run may take. A module without numpy or scipy, so that the
command line can show them in its help without importing the statistics."""

BASELINE_RUNS = 24
"""Runs of a series that make its baseline (its median and MAD)."""
PROBE_K = 0.5
"""The CUSUM's reference value, in baseline standard deviations."""
PROBE_H = 16.0
"""The CUSUM's alarm threshold, in baseline standard deviations."""
DEFAULT_TEAM = "probe"
"""The team probe requests are metered and charged under."""
DEFAULT_TIMEOUT_S = 300.0
"""Seconds one probe request may take."""
