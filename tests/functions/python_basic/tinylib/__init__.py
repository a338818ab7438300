"""A pure-Python dependency vendored into the deployment package."""
import re

from .version import __version__  # noqa: F401  (a sub-module import, too)


def slugify(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
