"""A run's writer lock file, in this user's own lock directory under the machine's temp directory: nothing
another local user made there (the directory, a link or a file in it) is used."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path

from lab.core.errors import LabError


class LockError(LabError):
    pass


def open_lock(name: str) -> int:
    """A writer lock file in this user's lock directory in the temp directory (created 0700). Another local
    user who made that directory, or a link or file in it, could hold the user's locks or have a writer
    overwrite one of the user's files: such a directory or file is refused (one line); the user's own directory
    with looser modes (an older lab made it 0755) is tightened to 0700."""
    uid = os.getuid()
    locks = Path(tempfile.gettempdir()) / f"prefill-lab-locks-{uid}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(locks, 0o700)
    try:
        dfd = os.open(locks, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        link = e.errno in (errno.ELOOP, errno.ENOTDIR)
        what = "is a symbolic link or not a directory" if link else f"cannot be opened ({e.strerror})"
        raise LockError(
            f"the lock directory {locks} {what}; remove it, or set TMPDIR to a directory of yours"
        ) from None
    try:
        owner = os.fstat(dfd).st_uid
        if owner != uid:
            raise LockError(
                f"the lock directory {locks} belongs to uid {owner}, not to you (uid {uid}); have it removed, or set "
                "TMPDIR to a directory of yours"
            )
        os.fchmod(dfd, 0o700)
        path = locks / name
        try:  # no O_TRUNC: the file is emptied once its lock is held
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        except OSError as e:
            what = "is a symbolic link" if e.errno == errno.ELOOP else f"cannot be opened ({e.strerror})"
            raise LockError(f"the lock file {path} {what}; remove it and retry") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_nlink != 1:  # a hard link to a user's file
            os.close(fd)
            raise LockError(f"the lock file {path} is not a file of yours alone; remove it and retry")
        return fd
    finally:
        os.close(dfd)
