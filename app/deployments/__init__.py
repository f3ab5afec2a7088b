"""The deployments registry: deployments, their replicas (GPUs, billing ResourceId, URL) and
how their billing rows are found (a tag value, or a replica's ResourceId).
"""
