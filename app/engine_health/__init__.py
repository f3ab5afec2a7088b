"""Engine health of the serving hosts (issue 16): the draft model's memory measured from
vLLM's start-up logs and priced (:mod:`app.engine_health.draft_memory`), and the NUMA
placement of a replica checked against its host's topology (:mod:`app.engine_health.numa`).
The rules themselves are pure: :mod:`app.engine_health.rules.engine_memory`, :mod:`app.engine_health.rules.numa`."""
