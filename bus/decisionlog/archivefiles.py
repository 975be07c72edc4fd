"""The audit archive's files on disk: written durably, read back whole, never through a symbolic link.

A file is written under a temporary name (``.part-<hash>.parquet.tmp``), synced, read back and
checked to be a whole Parquet file, renamed into place, and its folder synced. Every folder
under the archive's root is opened relative to its parent with ``O_NOFOLLOW``, so a symbolic
link anywhere under the root is refused, never followed. On a pyarrow filesystem (object
stores) a file is written under its temporary name, read back and moved.
"""

from __future__ import annotations

import logging
import os
import posixpath
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from bus.errors import ArchiveError

logger = logging.getLogger("hookbus.audit.archive")

TMP_SUFFIX: Final = ".tmp"


def rows_in(data: bytes | pa.NativeFile) -> int:
    """The rows of a whole Parquet file; ArchiveError when it is not one (cut short, corrupt)."""
    try:
        return int(pq.ParquetFile(pa.BufferReader(data) if isinstance(data, bytes) else data).metadata.num_rows)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ArchiveError(f"not a whole Parquet file ({exc})") from exc


@dataclass(frozen=True, slots=True)
class Written:
    """One file a write put in place (or found there already, whole)."""

    path: str
    rows: int
    size: int
    replaced: bool = False


def open_dir(root_fd: int, folder: str) -> int:
    """A descriptor of ``folder`` under ``root_fd``, made where missing, no component a symbolic link."""
    fd = os.dup(root_fd)
    try:
        for name in folder.split("/"):
            try:
                os.mkdir(name, 0o750, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise ArchiveError(f"{name} in {folder} is not a folder (a symbolic link is refused): {exc}") from exc
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _existing_rows(dir_fd: int, name: str) -> int | None:
    """The rows of the whole Parquet file ``name`` (None: missing, or not whole)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as file:
        try:
            return rows_in(file.read())
        except ArchiveError:
            return None


def folder_fd(root: str, folder: str) -> int:
    """A descriptor of ``root/folder`` (:func:`open_dir`: made where missing, no link followed)."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return open_dir(root_fd, folder)
    finally:
        os.close(root_fd)


def write_local(root: str, folder: str, name: str, data: bytes) -> Written:
    """Put ``data`` (a whole Parquet file) at ``root/folder/name``; a whole file there already is kept."""
    path = os.path.join(root, folder, name)
    dir_fd = folder_fd(root, folder)
    try:
        replaced = False
        if (rows := _existing_rows(dir_fd, name)) is not None:
            return Written(path, rows, len(data))
        if os.path.lexists(path):
            logger.warning("%s is not a whole Parquet file (cut short or corrupt): writing it again", path)
            replaced = True
        tmp = f".{name}{TMP_SUFFIX}"
        unlink(tmp, dir_fd)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o640, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            check = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
            with os.fdopen(check, "rb") as file:  # what the disk holds, not what was meant
                rows = rows_in(file.read())
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            unlink(tmp, dir_fd)
            raise
        os.fsync(dir_fd)
        return Written(path, rows, len(data), replaced)
    finally:
        os.close(dir_fd)


def unlink(name: str, dir_fd: int) -> None:
    """Remove ``name`` in the folder ``dir_fd`` if it is there."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def write_remote(fs: pafs.FileSystem, folder: str, name: str, data: bytes) -> Written:
    """:func:`write_local` on a pyarrow filesystem: written under the temporary name, read back, moved."""
    path = posixpath.join(folder, name)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        with fs.open_input_file(path) as file:
            try:
                return Written(path, rows_in(file.read()), len(data))
            except ArchiveError:
                logger.warning("%s is not a whole Parquet file (cut short or corrupt): writing it again", path)
    fs.create_dir(folder, recursive=True)
    tmp = posixpath.join(folder, f".{name}{TMP_SUFFIX}")
    with fs.open_output_stream(tmp) as out:
        out.write(data)
    with fs.open_input_file(tmp) as file:
        rows = rows_in(file.read())
    fs.move(tmp, path)
    return Written(path, rows, len(data), info.type == pafs.FileType.File)


def read_folder(root: str, folder: str) -> tuple[list[str], pa.Table | None]:
    """The Parquet files of ``root/folder`` (not through a link) and their rows, in name order."""
    dir_fd = folder_fd(root, folder)
    try:
        names = sorted(n for n in os.listdir(dir_fd) if n.startswith("part-") and n.endswith(".parquet"))
        tables = []
        for name in names:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
            with os.fdopen(fd, "rb") as file:
                tables.append(pq.read_table(pa.BufferReader(file.read())))
        return names, pa.concat_tables(tables) if tables else None
    finally:
        os.close(dir_fd)


def log_ids_local(root: str, folder: str, since_ms: int) -> set[str]:
    """The ``"<log_id> <id>"`` of every record in the Parquet files of ``root/folder`` changed at or after
    ``since_ms`` (a file holding a record is written after the record was logged, so older files
    cannot hold it); an empty set when the folder is not there."""
    if not os.path.isdir(os.path.join(root, folder)):
        return set()
    dir_fd = folder_fd(root, folder)
    try:
        found: set[str] = set()
        for name in os.listdir(dir_fd):
            if not (name.startswith("part-") and name.endswith(".parquet")):
                continue
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
            with os.fdopen(fd, "rb") as file:
                if os.fstat(file.fileno()).st_mtime_ns // 1_000_000 < since_ms:
                    continue
                found.update(_log_ids(file.read()))
        return found
    finally:
        os.close(dir_fd)


def log_ids_remote(fs: pafs.FileSystem, folder: str, since_ms: int) -> set[str]:
    """:func:`log_ids_local` on a pyarrow filesystem."""
    found: set[str] = set()
    for info in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
        name = info.base_name
        if info.type != pafs.FileType.File or not (name.startswith("part-") and name.endswith(".parquet")):
            continue
        if info.mtime_ns is not None and info.mtime_ns // 1_000_000 < since_ms:
            continue
        with fs.open_input_file(info.path) as file:
            found.update(_log_ids(file.read()))
    return found


def _log_ids(data: bytes) -> list[str]:
    """The ``"<log_id> <id>"`` of each record of a Parquet file (none when it is not whole: it is written again)."""
    try:
        table = pq.read_table(pa.BufferReader(data), columns=["log_id", "id"])
    except (pa.ArrowException, OSError, ValueError, KeyError):
        return []
    return [f"{log_id} {i}" for log_id, i in zip(table["log_id"].to_pylist(), table["id"].to_pylist(), strict=True)]


def remove_files(root: str, folder: str, names: list[str]) -> None:
    """Remove ``names`` from ``root/folder`` and sync the folder."""
    dir_fd = folder_fd(root, folder)
    try:
        for name in names:
            unlink(name, dir_fd)
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


__all__ = [
    "TMP_SUFFIX",
    "Written",
    "folder_fd",
    "log_ids_local",
    "log_ids_remote",
    "open_dir",
    "read_folder",
    "remove_files",
    "rows_in",
    "unlink",
    "write_local",
    "write_remote",
]
