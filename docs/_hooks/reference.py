"""The MkDocs hook that adds the generated references to the site (mkdocs.yml names it under
`hooks:`): reference/configuration.md from parley's configuration models and reference/tools.md
from the tools the server publishes. They exist only in the build, never in docs/; the text is
written by config_reference.py and tools_reference.py, next to this file."""

from __future__ import annotations

from config_reference import ROOTS, configuration_reference, sections, undocumented_fields
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from tools_reference import tools_reference

CONFIGURATION = "reference/configuration.md"
TOOLS = "reference/tools.md"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    models = [section.model for root in ROOTS for section in sections(root.model)]
    missing = undocumented_fields(models)
    if missing:
        raise PluginError(
            f"{CONFIGURATION}: every configuration field needs a description (Field(description=...)); "
            f"these have none: {', '.join(missing)}"
        )
    files.append(File.generated(config, CONFIGURATION, content=configuration_reference()))
    files.append(File.generated(config, TOOLS, content=tools_reference()))
    return files
