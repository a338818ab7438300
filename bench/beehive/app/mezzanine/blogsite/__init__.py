"""The BeeHive benchmark's Mezzanine site. Importing it puts the vendored packages
(site-packages/ beside this package, git-ignored) on sys.path, so that this directory, unchanged,
is both the monolith (gunicorn) and the web function's package."""

import os
import sys

_VENDORED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "site-packages")
if os.path.isdir(_VENDORED) and _VENDORED not in sys.path:
    sys.path.insert(1, _VENDORED)
