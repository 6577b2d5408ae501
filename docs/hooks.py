"""MkDocs hooks: the Configuration page is generated, at each build, from the settings'
declarations (poolserve/config/reference.py), so it can never list a flag the commands lack."""

from __future__ import annotations

from typing import Any


def on_page_read_source(page: Any, config: Any) -> str | None:
    if page.file.src_uri == "configuration.md":
        from poolserve.config.reference import reference

        return reference()
    return None
