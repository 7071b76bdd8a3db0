"""An optional journal file (`ORDERFLOW_MOCKS_STATE`) so the simulated services keep what they
charged, reserved, shipped and refunded across a restart.

Why: without it a restarted mocks process forgets every effect, and a repeated charge under a
key it already charged would be charged again — the very thing orderflow exists to prevent.

The file holds JSON lines; each line is the list of entries of one change (`Simulator.entries`
format). A line is written and fsynced before the call it belongs to is answered, so whatever a
caller was told survives a kill (and a power cut). At start the file is read, a torn last line
(a write cut short) is dropped, and the state is written afresh to a temporary file that
atomically replaces the journal. A lock file keeps a second process off the same journal.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any


class JournalError(Exception):
    """The journal cannot be used (unreadable, damaged, or in use by another process)."""


class FileJournal:
    """Append-only JSON lines with fsync; open with `FileJournal.open`, close when done."""

    def __init__(self, path: Path, fd: int, lock_fd: int) -> None:
        self.path = path
        self._fd = fd
        self._lock_fd = lock_fd

    @classmethod
    def open(cls, path: Path) -> tuple[FileJournal, list[dict[str, Any]]]:
        """Lock and read the journal; returns it and the entries to restore, in order."""
        lock_fd = _lock(path)
        try:
            entries = _read(path)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            os.close(lock_fd)
            raise JournalError(f"cannot open {path}: {exc.strerror}") from None
        except BaseException:
            os.close(lock_fd)
            raise
        return cls(path, fd, lock_fd), entries

    def rewrite(self, entries: list[dict[str, Any]], chunk: int = 500) -> None:
        """Replace the journal atomically by `entries` (the current state), then append there."""
        temporary = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for start in range(0, len(entries), chunk):
                _write_all(fd, _line(entries[start : start + chunk]))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self.path)
        _fsync_directory(self.path.parent)
        old, self._fd = self._fd, os.open(self.path, os.O_WRONLY | os.O_APPEND)
        os.close(old)

    def append(self, entries: list[dict[str, Any]]) -> None:
        """Write one change durably (the `Simulator` journal callback)."""
        _write_all(self._fd, _line(entries))
        os.fsync(self._fd)

    def close(self) -> None:
        """Release the file and its lock."""
        os.close(self._fd)
        os.close(self._lock_fd)


def _line(entries: list[dict[str, Any]]) -> bytes:
    return (json.dumps(entries, separators=(",", ":")) + "\n").encode()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _lock(journal: Path) -> int:
    """Hold `<journal>.lock` exclusively; a second process gets a clear refusal."""
    lock = journal.with_name(journal.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise JournalError(f"cannot create the lock file {lock}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise JournalError(f"{journal} is in use by another orderflow mocks process") from None
    return fd


def _read(path: Path) -> list[dict[str, Any]]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise JournalError(f"cannot read {path}: {exc.strerror}") from None
    lines = data.split(b"\n")
    entries: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            change = json.loads(line)
        except ValueError:
            if number == len(lines):  # the last write was cut short: it was never answered
                break
            raise JournalError(f"{path} line {number} is not JSON: the file is damaged") from None
        if not isinstance(change, list):
            raise JournalError(f"{path} line {number} is not a journal line")
        entries.extend(change)
    return entries


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # some file systems refuse fsync on a directory
            os.fsync(fd)
    finally:
        os.close(fd)
