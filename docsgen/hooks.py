"""MkDocs hooks (mkdocs.yml ``hooks:``): add the generated pages and the OpenAPI schema to
the site, and fail the build on anything :func:`docsgen.site.problems` finds."""

from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

from docsgen import api_reference, site


def on_files(files: Files, config: Any) -> Files:
    schema = api_reference.openapi_schema()
    generated = site.generated_pages(api=False)
    generated[site.GENERATED_API] = api_reference.render(schema)
    for path, content in generated.items():
        files.append(File.generated(config, path, content=content))
    files.append(File.generated(config, "openapi.json", content=api_reference.schema_json(schema)))
    found = site.problems(site.written_pages(), generated)
    if found:
        raise PluginError(
            f"the docs have {len(found)} problem(s):\n" + "\n".join(f"  {p}" for p in found)
        )
    return files
