"""Serving: the engines (vLLM and the other adapters), the metering proxy, the OpenTelemetry
collector and the load generator. vLLM is a process behind HTTP: nothing imports it.
"""
