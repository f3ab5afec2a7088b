"""Slurm clusters: job accounting in, partition schedules out."""
