"""txmap's exceptions. Every one raised by txmap names the region file
(``path``) when there is one, in its message and as an attribute."""

from __future__ import annotations

import errno as _errno


class Error(Exception):
    """Base class of txmap's errors. ``path``: the region file concerned, or None."""

    def __init__(self, *args: object, path: str | None = None) -> None:
        super().__init__(*args)
        self.path = path


class Conflict(Error):
    """The transaction conflicted with a concurrent commit. Nothing of it is
    visible: run it again (``View.run`` and ``transactional`` do)."""


class SnapshotTooOld(Conflict):
    """The region's snapshot limit expired this transaction's snapshot.
    Nothing of it is visible: run it again."""


class Aborted(Error):
    """The transaction was aborted: an exception left a nested transaction
    whose outer transaction then tried to commit."""


class TransactionError(Error):
    """The call needs a transaction (or no transaction, or a read-write one)
    and the view is not in that state; or the view is used by another thread
    at this moment."""


class InvalidError(Error, ValueError):
    """An argument txmap cannot accept (a range outside the region, a key
    too long, a name already taken, ...)."""


class CorruptError(Error):
    """A file holds bytes txmap did not write. ``offset``: where."""

    def __init__(self, *args: object, path: str | None = None, offset: int | None = None) -> None:
        super().__init__(*args, path=path)
        self.offset = offset


class FileError(Error, OSError):
    """A system call on the region's files failed (``errno``, ``filename``)."""

    def __init__(self, *args: object, path: str | None = None) -> None:
        OSError.__init__(self, *args)
        self.path = path


class RegionNotFoundError(FileError, FileNotFoundError):
    """The region file (or its log) does not exist."""


class RegionExistsError(FileError, FileExistsError):
    """``Region.create`` found the file already there."""


def _file_error(code: int, message: str, path: str | None) -> FileError:
    """The FileError subclass for an errno (used by the extension)."""
    cls = {_errno.ENOENT: RegionNotFoundError, _errno.EEXIST: RegionExistsError}.get(code, FileError)
    return cls(code, message, path, path=path)
