"""The WSGI callable: `gunicorn blogsite.wsgi:application` for the monolith, `kiln deploy …
--web-app blogsite.wsgi:application` for the function."""

import os

import blogsite  # noqa: F401  (the vendored packages on sys.path)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "blogsite.settings")

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
