def something_else(event, context):
    return "not the handler"
