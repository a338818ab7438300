#!/usr/bin/env python3
import os
import sys

if __name__ == "__main__":
    import blogsite  # noqa: F401  (the vendored packages on sys.path)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "blogsite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
