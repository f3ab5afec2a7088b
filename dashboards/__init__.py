"""Plotly dashboards served by the app: the data modules query, the figures are pure
(DataFrame in, Figure out), the pages render and the router serves.
"""
