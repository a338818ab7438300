import a_module_that_does_not_exist  # noqa: F401


def handler(event, context):
    return "unreachable"
