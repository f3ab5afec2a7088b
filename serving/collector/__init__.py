"""The OTLP/HTTP trace receiver (``specledger collect``): vLLM's request spans become the
same usage records as the proxy's, with the same exact GPU-seconds split.
"""
