#!/usr/bin/env python3
"""Creates the Mezzanine site's schema and seeds its blog: `python3 seed.py [--posts 60]
[--months 6] [--comments 4]` (the database from the environment, as the site's settings read
it). On an empty database it runs `createdb --noinput --nodata` (Django's migrations, the site,
an admin user); then, unless the blog already has posts, it adds POSTS published posts spread
evenly over MONTHS months (from January 2024, so `/blog/archive/2024/1/` has POSTS/MONTHS of
them) and COMMENTS comments on each. Prints one JSON line: the posts' slugs by month and the
number of comments."""

import argparse
import json
import os
import sys
from datetime import datetime, timedelta, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import blogsite  # noqa: E402,F401  (the vendored packages on sys.path)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "blogsite.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.sites.models import Site  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from mezzanine.blog.models import BlogPost  # noqa: E402
from mezzanine.generic.models import ThreadedComment  # noqa: E402


def month_start(first, offset):
    year, month = divmod(first.month - 1 + offset, 12)
    return first.replace(year=first.year + year, month=month + 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posts", type=int, default=60)
    parser.add_argument("--months", type=int, default=6)
    parser.add_argument("--comments", type=int, default=4, help="comments per post")
    args = parser.parse_args()

    if "conf_setting" not in connection.introspection.table_names():
        call_command("createdb", interactive=False, nodata=True, verbosity=0)
    else:
        call_command("migrate", interactive=False, verbosity=0)

    first = datetime(2024, 1, 1, 12, 0, tzinfo=timezone.utc)
    by_month = {}
    with transaction.atomic():
        if not BlogPost.objects.exists():
            author, _ = get_user_model().objects.get_or_create(username="author",
                                                               defaults={"email": "author@example.com"})
            site = Site.objects.get_current()
            for i in range(args.posts):
                month = i % args.months
                published = month_start(first, month) + timedelta(days=i // args.months, hours=i % 24)
                post = BlogPost.objects.create(
                    title=f"Post {i}: notes from month {month + 1}", slug=f"post-{i}", user=author,
                    content="".join(f"<p>Paragraph {p} of post {i}. " + "Lorem ipsum dolor sit amet. " * 8 + "</p>"
                                    for p in range(6)),
                    publish_date=published, status=2, site=site)
                for c in range(args.comments):
                    ThreadedComment.objects.create(
                        content_object=post, site=site, user_name=f"reader {c}", user_email=f"reader{c}@example.com",
                        comment=f"Comment {c} on post {i}.", submit_date=published + timedelta(hours=c + 1),
                        is_public=True, is_removed=False)
        for post in BlogPost.objects.order_by("publish_date", "id"):
            key = f"{post.publish_date.year}/{post.publish_date.month}"
            by_month.setdefault(key, []).append(post.slug)
    print(json.dumps({"posts": by_month, "comments": ThreadedComment.objects.count()}))


if __name__ == "__main__":
    main()
