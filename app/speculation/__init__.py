"""Speculation health: acceptance per draft position per deployment, and the k it advises."""
