import os

from django.db import connection
from django.db.backends.signals import connection_created
from django.http import JsonResponse
from django.shortcuts import redirect

# Which process opened each database connection: a zygote's forks must open their own.
OPENED_BY = []


def opened(sender, connection, **kwargs):
    OPENED_BY.append(os.getpid())


connection_created.connect(opened)


def whoami(request):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return JsonResponse({"pid": os.getpid(), "opened_by": OPENED_BY, "host": request.get_host(),
                         "absolute": request.build_absolute_uri("/x/"), "secure": request.is_secure(),
                         "get": dict(request.GET.lists())})


def archive(request, year, month):
    return JsonResponse({"year": year, "month": month, "path": request.path})


def go(request):
    return redirect(request.build_absolute_uri("/whoami/?from=go"))
