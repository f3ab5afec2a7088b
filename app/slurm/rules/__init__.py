"""The pure rules of app.slurm: no I/O, no database, no web framework."""
