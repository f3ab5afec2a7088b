"""The suite, mirroring the tree. ``tests/fixtures`` holds the FOCUS specification's examples
(CC-BY-4.0), a messy AWS-style export, and engine and host formats; each folder's README says
where its files come from.
"""
