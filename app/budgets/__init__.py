"""Budgets per team, cost center, deployment or tag: spend, thresholds, hard limits, forecasts."""
