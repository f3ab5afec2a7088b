"""API keys and proxy keys: creating, listing and revoking them, and the API's key check (an
admin key, or a team key that sees only its team's rows).
"""
