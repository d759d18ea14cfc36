"""The one exception type users see: a message naming the file and what is wrong."""


class InputError(Exception):
    """A problem with the user's input; a command prints it as one line and exits non-zero."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
