"""Autoscaling advice for Ray Serve on KubeRay, from the ledger and the breakeven curve."""
