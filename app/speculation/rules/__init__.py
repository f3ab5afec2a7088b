"""The pure rules of app.speculation: no I/O, no database, no web framework."""
