"""An MCP server over the ledger (``specledger mcp``): read-only tools whose results are the
REST API's bodies for the same query, scoped by the same API keys."""
