"""Cost anomalies per deployment and team, daily or hourly, with what drove them."""
