"""Breakeven sweeps and fits as a feature: storing sweeps and their fits, applying a fitted
schedule to a deployment's engine config, the tiers, and their routes.
"""
