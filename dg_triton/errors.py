"""The exception type of every argument check.

DeepGEMM raises RuntimeError from its C++ checks (API.md section 1); code written against it catches
RuntimeError. Code written against Python conventions catches ValueError. This type is both.
"""


class DGArgumentError(RuntimeError, ValueError):
    """A public function was called with an argument it cannot take. The message names the
    function, the argument, what was expected and what came."""


def reject(function: str, argument: str, expected: str, actual) -> "DGArgumentError":
    """Builds the error; callers ``raise reject(...)`` so the traceback points at the check."""
    return DGArgumentError(f"{function}: {argument} must be {expected}, got {actual}")
