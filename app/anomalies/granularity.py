"""How finely cost anomalies are bucketed: by day or by hour. Its own light module so that the
command line can offer it as an option without importing the detector."""

from enum import StrEnum


class Granularity(StrEnum):
    day = "day"
    hour = "hour"
