"""The metering proxy: the app (completions as raw ASGI), the relay, its own HTTP/1.1
client to the model servers, the meter service that splits each replica's GPU time for many
proxy processes and the ``--workers`` launcher, per-replica state, config, Prometheus
metrics, the usage sink and its durable spool, proxy keys in memory, hard budget limits, and
the pure parsers (OpenAI/vLLM wire bodies and SSE, attribution from the key and headers,
vLLM's spec-decode counters).
"""
