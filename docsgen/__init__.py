"""The documentation site's build tools (not shipped in the wheel).

``make docs`` runs ``mkdocs build --strict`` with :mod:`docsgen.hooks`, which adds the pages
generated from the code (the command-line reference from the Typer/Click tree, the API
reference from the OpenAPI schema, the layout from the package tree) and fails the build on
what :mod:`docsgen.checks` finds: a broken link or anchor, a ``specledger`` command or option
named in the docs that does not exist, a command that no page documents, a ``SPECLEDGER_*``
setting missing from the settings page, a ``make`` target that the Makefile lacks.
tests/test_docs.py runs the same checks without MkDocs.
"""
