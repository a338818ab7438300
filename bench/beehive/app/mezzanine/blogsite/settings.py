"""Settings of the benchmark's Mezzanine site: `mezzanine-project blogsite`'s, trimmed to the blog,
its comments and pages. Configured only through the environment:

- the database: `DATABASE_URL` (`postgresql://USER:PASSWORD@HOST:PORT/DB`), else `PGHOST`,
  `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`;
- `SECRET_KEY`: the monolith and the function must share it (sessions, CSRF, the comment form's
  security hash); the default is fine for a benchmark and nothing else.

DEBUG is off, any host is allowed, and static files are not served (the pages link to them
only). Mezzanine's page cache middleware is left out, so that every server renders every page
itself, and database connections are closed after each request (`CONN_MAX_AGE` 0, Django's
default)."""

import os
from urllib.parse import unquote, urlsplit

from django.utils.translation import gettext_lazy as _


def _database():
    url = os.environ.get("DATABASE_URL")
    if url:
        parts = urlsplit(url)
        return {
            "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
        }
    return {
        "NAME": os.environ.get("PGDATABASE", "mezzanine"),
        "USER": os.environ.get("PGUSER", ""),
        "PASSWORD": os.environ.get("PGPASSWORD", ""),
        "HOST": os.environ.get("PGHOST", ""),
        "PORT": os.environ.get("PGPORT", ""),
    }


DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", **_database()}}

SECRET_KEY = os.environ.get("SECRET_KEY", "kiln-beehive-mezzanine-benchmark-only")
NEVERCACHE_KEY = os.environ.get("NEVERCACHE_KEY", "kiln-beehive-mezzanine-nevercache")
DEBUG = False
ALLOWED_HOSTS = ["*"]

USE_MODELTRANSLATION = False
TIME_ZONE = "UTC"
USE_TZ = True
LANGUAGE_CODE = "en"
LANGUAGES = (("en", _("English")),)
USE_I18N = False
SESSION_EXPIRE_AT_BROWSER_CLOSE = True
SITE_ID = 1
AUTHENTICATION_BACKENDS = ("mezzanine.core.auth_backends.MezzanineBackend",)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

PROJECT_APP_PATH = os.path.dirname(os.path.abspath(__file__))
PROJECT_APP = os.path.basename(PROJECT_APP_PATH)
PROJECT_ROOT = BASE_DIR = os.path.dirname(PROJECT_APP_PATH)
STATIC_URL = "/static/"
STATIC_ROOT = os.path.join(PROJECT_ROOT, "static")
MEDIA_URL = "/media/"
MEDIA_ROOT = os.path.join(PROJECT_ROOT, "media")
ROOT_URLCONF = "blogsite.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "OPTIONS": {
            "context_processors": [
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.debug",
                "django.template.context_processors.i18n",
                "django.template.context_processors.static",
                "django.template.context_processors.media",
                "django.template.context_processors.request",
                "django.template.context_processors.tz",
                "mezzanine.conf.context_processors.settings",
                "mezzanine.pages.context_processors.page",
            ],
            "loaders": [
                "mezzanine.template.loaders.host_themes.Loader",
                "django.template.loaders.app_directories.Loader",
            ],
        },
    },
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.redirects",
    "django.contrib.sessions",
    "django.contrib.sites",
    "django.contrib.sitemaps",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "mezzanine.boot",
    "mezzanine.conf",
    "mezzanine.core",
    "mezzanine.generic",
    "mezzanine.pages",
    "mezzanine.blog",
]

MIDDLEWARE = (
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "mezzanine.core.request.CurrentRequestMiddleware",
    "mezzanine.core.middleware.RedirectFallbackMiddleware",
    "mezzanine.core.middleware.AdminLoginInterfaceSelectorMiddleware",
    "mezzanine.core.middleware.SitePermissionMiddleware",
    "mezzanine.pages.middleware.PageMiddleware",
)

PACKAGE_NAME_FILEBROWSER = "filebrowser_safe"
PACKAGE_NAME_GRAPPELLI = "grappelli_safe"
OPTIONAL_APPS = (PACKAGE_NAME_FILEBROWSER, PACKAGE_NAME_GRAPPELLI)

# Errors to stderr (gunicorn's log, the function's log), not to mail.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"handlers": ["console"], "level": "ERROR"}},
}

from mezzanine.utils.conf import set_dynamic_settings  # noqa: E402

set_dynamic_settings(globals())
