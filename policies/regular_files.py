"""Reading a workspace file the one safe way (SPEC T6): regular files only, never more than
a limit, never through a link swapped in at the last moment.

A FIFO named ``x.md`` blocks a plain ``open`` until someone writes to it, a character
device (``/dev/zero``) never ends, a socket cannot be opened at all: each hung or flooded a
reader. So the file is opened with ``O_NONBLOCK`` (an open of a FIFO returns at once) and
``O_NOFOLLOW``, and what was opened — not what the name led to a moment before — is checked
with ``fstat``: only a regular file is read, and only up to the limit. Every tool and every
harness read of a workspace file (instruction files, fingerprints) passes here.

A file with more than one name (hard links) is refused too: rules and forbidden paths judge
names, and a second name for ``secrets/key.txt`` under ``docs/`` would read the secret
under a name the policy allows. Which other names it has cannot be known without walking
the whole disk, so no name of it is read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC


class NotRegularFile(OSError):
    """The name leads to something that is not a regular file: a FIFO, a device, a socket,
    a folder or a link. Its message says which; ``what`` names it alone."""

    def __init__(self, message: str, what: str) -> None:
        super().__init__(message)
        self.what = what


class FileTooLarge(OSError):
    """The file is over the reader's limit; ``size`` is how large it says it is."""

    def __init__(self, message: str, size: int) -> None:
        super().__init__(message)
        self.size = size


def kind_of(mode: int) -> str:
    """What a file of this mode is, in words a person reads in an error."""
    for test, words in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a link"),
    ):
        if test(mode):
            return words
    return "not a regular file"


def _refusal(path: Path, what: str) -> NotRegularFile:
    message = f"{path.name} is {what}, not a regular file; only regular files are read."
    return NotRegularFile(message, what)


def open_regular(path: Path | str) -> int:
    """A descriptor of the regular file at ``path`` (the caller closes it). Raises
    FileNotFoundError, NotRegularFile, or another OSError saying why it cannot be read."""
    path = Path(path)
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _refusal(path, "a link") from None
        if error.errno == errno.ENXIO:  # a socket (or a FIFO's peer that went away)
            raise _refusal(path, "a socket") from None
        raise
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        os.close(fd)
        raise _refusal(path, kind_of(status.st_mode))
    if status.st_nlink > 1:
        os.close(fd)
        raise NotRegularFile(
            f"{path.name} has {status.st_nlink} names (hard links): it may be another name of "
            "a file the policy keeps out of reach, so it is not read.",
            "a file with several names",
        )
    return fd


def read_regular(path: Path | str, limit: int) -> bytes:
    """The bytes of the regular file at ``path``, or FileTooLarge when it holds more than
    ``limit`` (refused from its size first: a sparse file of gigabytes is never read)."""
    path = Path(path)
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(fd).st_size
        if size > limit:
            raise FileTooLarge(f"{path.name} is {size} bytes, over the limit of {limit}.", size)
        data = handle.read(limit + 1)  # it may have grown since: never more than the limit
    if len(data) > limit:
        raise FileTooLarge(f"{path.name} is over the limit of {limit} bytes.", len(data))
    return data
