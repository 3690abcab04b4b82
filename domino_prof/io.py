"""Small I/O helpers shared by every writer: nothing half-written ever looks complete."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to a temp file beside ``path``, fsync, then rename over it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give what open() would
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: object) -> Path:
    """JSON with NaN forbidden: 'no data' must be written as null, never NaN."""
    return atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


def atomic_write_all(
    files: list[tuple[str | os.PathLike, bytes]],
    *,
    append: list[tuple[str | os.PathLike, bytes]] | None = None,
) -> list[Path]:
    """Write several outputs all or nothing: each file goes to a temp file beside it
    (fsync) and only when every temp is written are they renamed into place; then the
    ``append`` targets (e.g. ``$GITHUB_STEP_SUMMARY``, appended to by convention) are
    appended to. On any failure the temps are removed and the files already renamed
    are removed again, so no output of a failed write looks complete. An OSError is
    re-raised with ``filename`` set to the output that failed."""
    temps: list[tuple[str, Path]] = []
    done: list[Path] = []
    handles = []

    def fail(path, e: OSError) -> OSError:
        return OSError(e.errno, e.strerror or str(e), str(path))

    try:
        for path, data in files:
            path = Path(path)
            try:
                if path.is_dir():
                    raise IsADirectoryError(21, "is a directory", str(path))
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
                temps.append((tmp, path))
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.chmod(tmp, 0o666 & ~_umask())
            except OSError as e:
                raise fail(path, e) from None
        for path, data in append or []:
            try:
                handles.append((open(path, "ab"), data, path))  # noqa: SIM115 - closed below
            except OSError as e:
                raise fail(path, e) from None
        for tmp, path in temps:
            try:
                os.replace(tmp, path)
            except OSError as e:
                raise fail(path, e) from None
            done.append(path)
        temps.clear()
        for f, data, path in handles:
            try:
                f.write(data)
                f.flush()
            except OSError as e:
                raise fail(path, e) from None
    except BaseException:
        for tmp, _ in temps:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        for path in done:
            try:
                os.unlink(path)
            except OSError:
                pass
        raise
    finally:
        for f, _, _ in handles:
            try:
                f.close()
            except OSError:
                pass
    return done
