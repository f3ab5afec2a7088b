"""The load generator and the breakeven sweep driver."""
