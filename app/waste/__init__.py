"""Waste findings: acceptance below its threshold (a request-clustered bound), speculation
above the breakeven, idle GPUs and the other findings, each with its monthly cost and the action
to take.
"""
