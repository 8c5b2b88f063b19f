"""What the authoring install needs from Python 3.11+, for Python 3.10.

Authoring, compiling, submitting and launching (``pip install kftrain``) run on Python 3.10-3.13; the
framework extras and the images use 3.11. Everything those modules use that 3.10 lacks comes from here.
"""

from __future__ import annotations

import enum
import sys

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, enum.Enum):
        """3.11's ``enum.StrEnum``: members are strings, and ``str()`` and ``format()`` give the value."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)


__all__ = ["StrEnum"]
