"""mkdocs hook: links from a page to repository files outside ``docs/``.

Results pages link the raw results they quote (``../benchmarks/results/<run>/README.md``). Those
files are not part of the site, so mkdocs cannot resolve them. This hook checks that each such
target exists in the repository (a missing one is a warning, which ``--strict`` turns into a
failure) and renders the link as the target's repository path. On GitHub the same Markdown
links work as they are.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.plugins.astream_repo_links")

LINK = re.compile(r"(?<!!)\[([^\]\n]+)\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def outside_target(page_src: Path, docs_dir: Path, target: str) -> Path | None:
    """The repository file ``target`` names, when it lies outside ``docs_dir``; else None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return None
    path = (page_src.parent / target.split("#", 1)[0]).resolve()
    if path == docs_dir or docs_dir in path.parents:
        return None
    return path


def rewrite(markdown: str, page_src: Path, docs_dir: Path, root: Path) -> tuple[str, list[str]]:
    """The page with outside links as repository paths, and the targets that do not exist."""
    missing: list[str] = []

    def sub(m: re.Match[str]) -> str:
        path = outside_target(page_src, docs_dir, m.group(2))
        if path is None:
            return m.group(0)
        if not path.exists():
            missing.append(m.group(2))
        try:
            shown = path.relative_to(root).as_posix()
        except ValueError:
            shown = m.group(2)
        text = m.group(1)
        return text if text.strip("`") == shown.rstrip("/") else f"{text} (`{shown}`)"

    out, in_fence = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            in_fence = not in_fence
        out.append(line if in_fence else LINK.sub(sub, line))
    return "\n".join(out), missing


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs_dir = Path(config["docs_dir"]).resolve()
    src = Path(page.file.abs_src_path).resolve()
    text, missing = rewrite(markdown, src, docs_dir, docs_dir.parent)
    for target in missing:
        log.warning("Doc file '%s' links '%s', which does not exist", page.file.src_uri, target)
    return text
