"""``deep_gemm.utils``: everything in ``utils.math`` and ``utils.layout`` (API.md 3), re-exported
at the top level of the package as well. Each module's ``__all__`` is the list."""
from . import layout, math
from .layout import *  # noqa: F401,F403
from .math import *  # noqa: F401,F403

__all__ = [*math.__all__, *layout.__all__]
