"""The pure rules of app.probe: no I/O, no database, no web framework."""
