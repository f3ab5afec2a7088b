"""The pure rules of app.budgets: no I/O, no database, no web framework."""
