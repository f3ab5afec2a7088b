"""Where billing files come from: local files and folders, and S3 (AWS Data Exports, by
their newest manifests).
"""
