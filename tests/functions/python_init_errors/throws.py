class InitFailure(Exception):
    pass


raise InitFailure("init went wrong in python")
