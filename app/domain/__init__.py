"""The pure domain: the shared words of every feature (money, periods and windows, errors with a
code and an HTTP status, the usage record, the ledger vocabulary, the FOCUS columns,
GPU-seconds, sessions, attribution) and pure rules. Imports no I/O library (an import-linter
contract).
"""
