from django.urls import path

from . import views

urlpatterns = [
    path("whoami/", views.whoami),
    path("archive/<int:year>/<str:month>/", views.archive),
    path("go/", views.go),
]
