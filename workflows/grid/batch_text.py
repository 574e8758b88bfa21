"""Text that goes into batch scripts and submit descriptions: checked, sanitised or quoted, never raw.

A batch script is a shell script with directives in comments; a line break in a value ends the
directive and starts a line of shell (a config ``process: "x\\ncurl ... | sh"`` became a command of
every job). So:

* **names** (the process name in ``#SBATCH --job-name``, HTCondor's ``batch_name``) are sanitised to
  ``[A-Za-z0-9._+-]``: they only label jobs;
* **paths and values** (task directory, working directory, interpreter, executor options) are
  refused when they hold a control character (:func:`plain`), then quoted for the reader:
  :func:`sbatch_value` for ``#SBATCH`` lines (sbatch reads double quotes and backslashes there),
  ``shlex`` for shell lines, :func:`condor_text` (no macro expansion), :func:`condor_arguments` and
  :func:`classad_string` for HTCondor.
"""

from __future__ import annotations

import re
import shlex
import unicodedata

from .errors import GridError

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def control_characters(text: str) -> list[str]:
    """The control characters in ``text`` (line breaks, tabs, NUL, escape, Unicode line separators)."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Zl", "Zp")]


def plain(text: str, what: str) -> str:
    """``text`` unchanged when it holds no control character.

    Raises:
        GridError: naming ``what`` and the character, e.g. ``task directory '/t/a\\nb' holds a line break``.
    """
    bad = control_characters(str(text))
    if bad:
        kind = "a line break" if bad[0] in "\n\r\u2028\u2029\x85" else f"the control character {bad[0]!r}"
        raise GridError(f"{what} {str(text)!r} holds {kind}, which would end a line of the batch script; "
                        f"rename it")
    return str(text)


def job_name(text: str, limit: int = 64) -> str:
    """A label safe anywhere: runs of other characters become ``_`` (``"a b\\nc"`` → ``"a_b_c"``)."""
    return _NAME_UNSAFE.sub("_", text).strip("_")[:limit] or "job"


def sbatch_value(text: str, what: str) -> str:
    """A value for an ``#SBATCH --option=VALUE`` line: checked, and double-quoted when it needs to be."""
    plain(text, what)
    if re.fullmatch(r"[A-Za-z0-9_./:%@,+=-]*", text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sbatch_option(text: str, what: str) -> str:
    """A whole extra ``#SBATCH`` option (``--gres=gpu:1``): must start with ``-``; its value is quoted."""
    plain(text, what)
    name, sep, value = text.partition("=")
    if not re.fullmatch(r"--?[A-Za-z][A-Za-z0-9-]*", name):
        raise GridError(f"{what} {text!r} is not an sbatch option (like --gres=gpu:1)")
    return name + (sep + sbatch_value(value, what) if sep else "")


def shell_words(words: list[str], what: str) -> str:
    """Words for a shell line, each checked and quoted."""
    return shlex.join([plain(w, what) for w in words])


def condor_text(text: str, what: str) -> str:
    """A literal for an HTCondor submit value: checked, and each ``$`` written ``$(DOLLAR)`` so a path
    holding ``$(name)`` is not expanded as a macro."""
    return plain(text, what).replace("$", "$(DOLLAR)")


def condor_arguments(words: list[str], what: str) -> str:
    """HTCondor's quoted ``arguments`` syntax: the whole in double quotes, each word in single quotes.

    ``$(name)`` macros inside a word still expand (HTCondor expands them before it splits).
    """
    quoted = []
    for word in words:
        plain(word, what)
        word = word.replace('"', '""').replace("'", "''")
        quoted.append(f"'{word}'" if re.search(r"[\s']", word) or not word else word)
    return '"' + " ".join(quoted) + '"'


def classad_string(text: str, what: str) -> str:
    """A ClassAd string literal (backslashes and double quotes escaped)."""
    plain(text, what)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def submit_value(text: str, what: str) -> str:
    """A value of a ``key = value`` submit command: one line, as given."""
    return plain(text, what)


def submit_key(text: str, what: str) -> str:
    """A submit command name (``request_gpus``, ``+MyAttr``, ``My.Attr``)."""
    if not re.fullmatch(r"\+?[A-Za-z_][A-Za-z0-9_.]*", text):
        raise GridError(f"{what} {text!r} is not a submit command name (letters, digits, _ and .; + for an attribute)")
    return text
