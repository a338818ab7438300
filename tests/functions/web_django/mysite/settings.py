# A minimal Django project, as `django-admin startproject` would lay it out, on SQLite in /tmp.
SECRET_KEY = "kiln-test-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "mysite.urls"
INSTALLED_APPS = []
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "/tmp/db.sqlite3"}}
USE_TZ = True
USE_I18N = False
