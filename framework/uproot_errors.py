"""uproot's exceptions cut to one short line: the one place their text is shortened for a user.

uproot writes its messages for its own developers: a ``DeserializationError`` lists the objects it was
inside, with their memory addresses, and most messages end with ``in file PATH`` / ``in object PATH``
lines; one from an undecodable branch ran to 880 characters. The framework's own message already names
the branch, its type and the file, so what it adds of uproot's is the statement of the problem alone,
without addresses or paths, at most :data:`REASON_CHARS` characters. The whole text is logged at debug
level, which ``sonic -v`` shows.
"""

from __future__ import annotations

import logging
import re

log = logging.getLogger(__name__)

#: the most characters of uproot's reason a message carries (the framework's part names what and where)
REASON_CHARS = 80
#: the most characters of a C++ type name a message carries (a leaf-list struct's lists every leaf)
TYPE_CHARS = 50

_ADDRESS = re.compile(r"\s+at 0x[0-9a-fA-F]+")
#: uproot's trailing "in file PATH" / "in object PATH": the framework's message names the file already
_WHERE = re.compile(r"(?:^|\s+)in (?:file|object) .*$")
#: uproot's "basket 0 in tree/branch /Events;1:x has ...": the framework's message names the branch already
_BRANCH = re.compile(r"\s+in tree/branch \S+")


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with ``...``."""
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def reason(err: BaseException, about: str) -> str:
    """The one-line, short form of uproot's ``err``; logs the full text at debug level.

    Args:
        err: what uproot raised.
        about: what was being read (``"branch 'x' of FILE"``), for the debug log.
    """
    log.debug("%s: uproot's full message: %s: %s", about, type(err).__name__, err)
    message = getattr(err, "message", None)  # a DeserializationError's problem, without its breadcrumbs
    text = message if isinstance(message, str) and message else str(err)
    lines = (_BRANCH.sub("", _WHERE.sub("", _ADDRESS.sub("", line))) for line in text.splitlines())
    return clip(f"{type(err).__name__}: {' '.join(' '.join(lines).split())}", REASON_CHARS)


def typename(name: str) -> str:
    """A C++ type name short enough for a one-line message."""
    return clip(" ".join(name.split()), TYPE_CHARS)
