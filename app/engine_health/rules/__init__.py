"""The pure rules of app.engine_health: no I/O, no database, no web framework."""
