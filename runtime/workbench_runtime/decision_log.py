"""An append-only decision log: one JSON line per question decision, for ``workbench monitor``.

::

    from workbench_runtime import DecisionLog, Policy

    log = DecisionLog("logs/decisions.jsonl", rotate_bytes=64 * 2**20)
    policy = Policy.load("policy.json")
    decision = policy.decide(response, decision_id="req-8812", log=log)

Each record (keys in this order)::

    {"decision_id", "time" (UTC ISO-8601), "policy_hash", "policy_version", "model", "schema_hash",
     "question", "action", "option", "would_accept" (the option the rule would have accepted when the
     rollout held it back: shadow mode or a disabled option; else null), "p_top", "margin", "probs"
     (provider probabilities in schema order, null when the answer failed)}

Properties production code relies on:

- **never breaks the caller**: every error (disk full, permissions, a value that is not
  JSON, a path that is not a regular file) is swallowed and counted (``n_errors``, ``last_error``)
  and reported by a rate-limited warning of the ``workbench_runtime.decision_log`` logger (one per
  kind of failure per minute; it names the path and the error, never a record's contents); the
  caller's decision is returned unchanged. A FIFO, device or directory at the path is refused when
  the log is built and at every open (it is opened non-blocking and checked with ``fstat``), so a
  FIFO without a reader never blocks ``decide``.
- **several writers on one path** — threads sharing a ``DecisionLog``, several ``DecisionLog``
  objects, several processes (forked ones included) — **lose nothing and duplicate nothing**, on a
  local POSIX file system: every record a writer counts in ``n_records`` is in exactly one file of
  the log, whole, on its own line. A decision's lines are written with one ``write`` on an
  ``O_APPEND`` descriptor, under a shared ``flock`` on a sidecar lock file (``.NAME.lock`` beside
  the log; do not delete it while writers run); a rotation takes the lock exclusively, so no write
  is ever in flight while the file is renamed. Before each write a writer checks that the path
  still names the file it holds (another writer may have rotated it) and reopens it if not. (All
  writers of a path must run this version: an older runtime neither locks nor numbers backups.)
- **rotation** is O(1): when a write would take the file past ``rotate_bytes`` the writer renames
  it to the next numbered backup, ``PATH.00000001``, ``PATH.00000002``, … (numbers only grow, an
  existing file is never overwritten; the last number is kept in the lock file), and the next
  write starts a new file. With ``backups=k`` the backup ``k`` numbers older than the new one is
  deleted (the first rotation of each ``DecisionLog`` also sweeps older excess files). A rotation
  waits for the writes in flight (microseconds) and for a reader opening the files; writes of
  other writers that started before the file was full may take it a few lines past
  ``rotate_bytes``. Logs in the older layout (``PATH.1`` newest, ``PATH.2``, … shifted at every
  rotation) are still read, before the numbered backups.
- **crash safety and full disks**: a crash mid-write leaves at most a torn last line. Before
  each write a writer checks that the file ends with a newline and starts its record on a new
  line if it does not, so a torn fragment stays alone on its line; readers
  (:func:`read_decision_log`, ``workbench monitor``) skip it with a warning. A partial write (disk
  full, file-size limit) counts as an error, not as written records: the writer truncates its
  fragment away (under the exclusive lock, when it is still the end of the file) and the next
  record starts on a new line. (Only when another writer appends between the partial write and its
  repair does the fragment stay, as a skipped line, with any whole lines it holds readable.)

:func:`log_files` lists a log's files oldest first and :func:`read_decision_log` reads them all,
each record once: it opens every file under the shared lock, so a rotation cannot move a file
between listing and opening. Standard library only (``fcntl`` where available: without it, as on
Windows, the log is safe for one writer object only).
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import stat
import sys
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from workbench_runtime.jsonio import StrictJSONError, loads_strict

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: one writer object per path
    fcntl = None  # type: ignore[assignment]

#: Default size at which a log file is rotated (64 MiB).
ROTATE_BYTES = 64 * 2**20

#: Seconds between two warnings of one kind of failure (per ``DecisionLog``).
WARN_INTERVAL = 60.0

#: Digits of a numbered backup (``PATH.00000001``); shorter numeric suffixes are the older layout.
BACKUP_DIGITS = 8

logger = logging.getLogger("workbench_runtime.decision_log")

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
#: the string escaping the encoder above uses (ensure_ascii=False): the C function when available
_encode_str = json.encoder.encode_basestring
_DIGITS = re.compile(r"[0-9]+")
_COUNTER_WIDTH = 20  # the lock file holds the last backup number, zero-padded to a fixed width
_SH, _UN = (fcntl.LOCK_SH, fcntl.LOCK_UN) if fcntl is not None else (0, 0)


def new_decision_id() -> str:
    """A random decision id (32 hex digits) for callers that have none of their own."""
    return uuid.uuid4().hex


def _finite(x: Any) -> float | None:
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def _json(v: Any) -> str:
    """``_dumps(v)``: a ``str``'s and ``None``'s text without the encoder's set-up (the same C escaping)."""
    if type(v) is str:
        return _encode_str(v)
    return "null" if v is None else _dumps(v)


def _json_float(v: Any) -> str:
    """``_dumps(_finite(v))``: a finite float's ``repr`` (what the encoder writes), else ``null``."""
    f = _finite(v)
    return "null" if f is None else _float_repr(f)


def _probs_list(p: Any) -> list:
    return p.tolist() if hasattr(p, "tolist") else [float(v) for v in p]


#: ``repr`` of the probabilities logged lately: the shortest text that reads back as the same float (what
#: ``json`` writes), remembered because computing it is most of a line's cost (a 17-digit value: ~0.6 µs,
#: 77 per line) while providers' rounded probabilities repeat. Bounded (~7 MB at most); emptied when full.
_FLOAT_TEXT: dict[float, str] = {}
_FLOAT_TEXT_MAX = 1 << 16
_float_repr = float.__repr__
#: the byte of a native float64 that holds its sign bit
_SIGN_BYTE = 7 if sys.byteorder == "little" else 0
_time_ns = time.time_ns  # (log_decisions has a parameter named time)


def _probs_text(p: Any) -> str | None:
    """The JSON array ``json`` writes for a 1-D float64 array of finite values, from remembered texts;
    None for anything else (the caller encodes it as before).

    Byte for byte the encoder's text: each value's ``float.__repr__``. ``0.0`` and ``-0.0`` would share a
    key, so an array with a sign bit set anywhere is left to the encoder (as are NaN and infinities, which
    it refuses). numpy is not imported here: a reader of logs does not need it, and an ndarray means it is loaded.
    """
    np = sys.modules.get("numpy")
    if np is None or type(p) is not np.ndarray or p.ndim != 1 or p.dtype.char != "d" or not p.dtype.isnative:
        return None
    if max(p.tobytes()[_SIGN_BYTE::8], default=0) >= 0x80:  # a sign bit (-0.0, a negative value or NaN)
        return None
    values = p.tolist()
    texts: list[Any] = list(map(_FLOAT_TEXT.get, values))  # NaN never matches a key; infinities are never stored
    if None in texts:
        cache = _FLOAT_TEXT
        for j, t in enumerate(texts):
            if t is None:
                x = values[j]
                if not math.isfinite(x):
                    return None
                t = texts[j] = _float_repr(x)
                if len(cache) >= _FLOAT_TEXT_MAX:
                    cache.clear()
                cache[x] = t
    return "[" + ",".join(texts) + "]"


def lock_path(path: str | os.PathLike) -> Path:
    """The sidecar lock file of a log (``DIR/.NAME.lock``: hidden, so ``NAME*`` globs do not match it)."""
    p = Path(path)
    return p.with_name(f".{p.name}.lock")


def backup_path(path: str | os.PathLike, number: int) -> Path:
    """The numbered backup ``number`` of a log (``PATH.00000001`` is the oldest ever written)."""
    p = Path(path)
    return p.with_name(f"{p.name}.{number:0{BACKUP_DIGITS}d}")


class PartialWriteError(OSError):
    """A write stored only part of a record batch (disk full, file-size limit)."""


class NotARegularFileError(OSError):
    """The log path names a FIFO, a device, a socket or a directory."""


def _kind_of(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"


def _refusal(path: Path, mode: int) -> OSError:
    what = _kind_of(mode)
    if what == "directory":
        return IsADirectoryError(f"{path} is a directory, not a regular file")
    return NotARegularFileError(f"{path} is a {what}, not a regular file: refused (a FIFO would block every decision)")


_LOGS: weakref.WeakSet[DecisionLog] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A forked child must not share the parent's lock-file description (flock locks belong to it, so
    # parent and child would not exclude each other) nor a thread lock another thread held at the fork.
    for log in list(_LOGS):
        log._lock = threading.Lock()
        for fd in (log._fd, log._lk):
            if fd is not None and fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        log._fd, log._id, log._lk = None, None, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class DecisionLog:
    """Append-only JSON Lines log of question decisions with size-based rotation, safe for several writers.

    Parameters
    ----------
    path : file to append to (parent directories are created)
    rotate_bytes : rotate before a write would take the file past this size (``None``: never)
    backups : rotated files to keep (``None``: keep all)
    fsync : ``os.fsync`` after every decision (durable across power loss; costs a disk flush)
    clock : returns the decision time (default ``datetime.now(UTC)``; a replay of history passes its own)
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        rotate_bytes: int | None = ROTATE_BYTES,
        backups: int | None = None,
        fsync: bool = False,
        clock: Callable[[], datetime] | None = None,
    ):
        self.path = Path(path)
        self._spath = os.fspath(self.path)
        self.clock = clock
        self.rotate_bytes = rotate_bytes
        self.backups = backups
        self.fsync = fsync
        self.n_records = 0
        self.n_errors = 0
        self.n_rotations = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._fd: int | None = None  # the live file, opened O_APPEND
        self._id: tuple[int, int] | None = None  # its (st_dev, st_ino)
        self._readable = True  # _fd allows pread (tail checks, repairs)
        self._end = -1  # the file's size right after our last write (its tail is then our newline)
        self._lk: int | None = None  # the lock file (-1: unavailable, write without locking)
        self._last_backup: int | None = None  # without a lock file: the last backup number
        self._swept = False
        self._warned: dict[str, tuple[float, int]] = {}
        self._second: tuple[int, str] = (-1, "")  # (UNIX second, its "YYYY-MM-DDTHH:MM:SS" in UTC)
        _LOGS.add(self)
        try:  # refuse a FIFO/device/directory now, before any decision waits on it
            st = os.stat(self.path)
        except OSError:
            pass
        else:
            if not stat.S_ISREG(st.st_mode):
                exc = _refusal(self.path, st.st_mode)
                self.last_error = f"{type(exc).__name__}: {exc}"
                self._warn("open", exc)

    # -- failures --------------------------------------------------------------------------------------
    def _warn(self, kind: str, exc: BaseException) -> None:
        """A warning per kind of failure at most every WARN_INTERVAL seconds; never a record's contents."""
        now = time.monotonic()
        last, suppressed = self._warned.get(kind, (-math.inf, 0))
        if now - last < WARN_INTERVAL:
            self._warned[kind] = (last, suppressed + 1)
            return
        self._warned[kind] = (now, 0)
        if isinstance(exc, OSError):  # our own messages and the system's: a path and an errno text
            what = f"{type(exc).__name__}: {exc}"
        else:  # anything else (a value that is not JSON …) might quote a record: its type only
            what = type(exc).__name__
        more = f" ({suppressed} more since the last warning)" if suppressed else ""
        logger.warning(
            "decision log %s: %s failed: %s%s; decisions go on unlogged (%d error(s) so far)",
            self.path,
            kind,
            what,
            more,
            self.n_errors,
        )

    def _fail(self, kind: str, exc: BaseException) -> None:
        self.n_errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        self._warn(kind, exc)

    # -- locking ---------------------------------------------------------------------------------------
    def _lock_fd(self) -> int:
        if self._lk is None:
            if fcntl is None:
                self._lk = -1
            else:
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._lk = os.open(lock_path(self.path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                except OSError as exc:  # e.g. a read-only directory: go on as the only writer
                    self._lk = -1
                    self._warn("lock", exc)
        return self._lk

    @staticmethod
    def _flock(lk: int, op: int) -> None:
        if lk >= 0:
            fcntl.flock(lk, op)

    @staticmethod
    def _exclusive(lk: int) -> None:
        """Swap the shared lock for the exclusive one (not atomic: callers look at the file again after)."""
        if lk >= 0:
            fcntl.flock(lk, fcntl.LOCK_UN)
            fcntl.flock(lk, fcntl.LOCK_EX)

    # -- file handling (under the lock) ----------------------------------------------------------------
    def _open(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self._spath, os.O_RDWR | flags, 0o644)
            readable = True
        except PermissionError:  # a write-only file: no tail checks
            fd = os.open(self._spath, os.O_WRONLY | flags, 0o644)
            readable = False
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a FIFO without a reader
                raise NotARegularFileError(f"{self.path} is a FIFO, not a regular file: refused") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _refusal(self.path, st.st_mode)
            if fcntl is not None and hasattr(os, "O_NONBLOCK"):
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        except BaseException:
            os.close(fd)
            raise
        self._close_fd()
        self._fd, self._id, self._readable = fd, (st.st_dev, st.st_ino), readable
        return fd

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd, self._id, self._end = self._fd, None, None, -1
            os.close(fd)

    def _current(self) -> tuple[int, int]:
        """The descriptor of the file the path names now (reopened if another writer rotated it), and its size."""
        try:
            st = os.stat(self._spath)
        except FileNotFoundError:
            st = None
        if st is None or self._fd is None or (st.st_dev, st.st_ino) != self._id:
            fd = self._open()
            return fd, os.fstat(fd).st_size
        return self._fd, st.st_size

    def _read_counter(self, lk: int) -> int:
        if lk >= 0:
            raw = os.pread(lk, _COUNTER_WIDTH + 1, 0)
            if raw.strip().isdigit():
                return int(raw)
        elif self._last_backup is not None:
            return self._last_backup
        # no counter yet (or a lost one): the highest numbered backup on disk, listed once
        return max((n for n, _ in _numbered(self.path)[1]), default=0)

    def _rotate(self, lk: int) -> None:
        """Under the exclusive lock: the live file becomes the next numbered backup (O(1))."""
        if self.backups == 0:
            self.path.unlink()
        else:
            n = self._read_counter(lk) + 1
            while backup_path(self.path, n).exists():  # a stale counter never overwrites a backup
                n += 1
            os.rename(self.path, backup_path(self.path, n))
            if lk >= 0:
                os.pwrite(lk, f"{n:0{_COUNTER_WIDTH}d}\n".encode(), 0)
            self._last_backup = n
            if self.backups is not None:
                if self._swept:
                    backup_path(self.path, n - self.backups).unlink(missing_ok=True)
                else:  # once per DecisionLog: whatever an earlier setting or layout left beyond `backups`
                    self._swept = True
                    for old in _backups(self.path)[: -self.backups]:
                        old.unlink(missing_ok=True)
        self.n_rotations += 1
        self._close_fd()

    def _write(self, data: bytes) -> None:
        """Append ``data`` (whole lines) under the shared lock; raises on any failure, a partial write included."""
        lk = self._lock_fd()
        self._flock(lk, _SH)
        try:
            fd, size = self._current()
            if self.rotate_bytes is not None and size and size + len(data) > self.rotate_bytes:
                # every writer that sees the file full queues here without a shared lock, so the
                # writes in flight end and one of them rotates; the others find the new file
                self._exclusive(lk)
                fd, size = self._current()
                if size and size + len(data) > self.rotate_bytes:
                    try:
                        self._rotate(lk)
                    except OSError as exc:  # the record still goes to the live file
                        self._fail("rotation", exc)
                    fd, size = self._current()
            if size and size != self._end and self._readable and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # a torn line (a writer died mid-write): ours starts on a new line
            self._end = -1
            n = os.write(fd, data)
            if n < len(data):
                self._repair(lk, fd, data[:n])
                raise PartialWriteError(f"{self.path}: partial write, {n} of {len(data)} bytes (disk full?)")
            self._end = size + n  # unless another writer appended meanwhile: then the next write checks
            if self.fsync:
                os.fsync(fd)
        finally:
            self._flock(lk, _UN)

    def _repair(self, lk: int, fd: int, fragment: bytes) -> None:
        """Remove a partial write's fragment when it is still the end of the file (under the exclusive lock)."""
        if not fragment or not self._readable:
            return
        try:
            self._exclusive(lk)
            size = os.fstat(fd).st_size
            start = size - len(fragment)
            if start >= 0 and os.pread(fd, len(fragment), start) == fragment:
                if start == 0 or os.pread(fd, 1, start - 1) == b"\n" or fragment.startswith(b"\n"):
                    os.ftruncate(fd, start)
        except OSError:
            pass

    # -- writing ---------------------------------------------------------------------------------------
    def append(self, records: Sequence[Mapping[str, Any]]) -> bool:
        """Append records (one line each) in one write; False (and counted) on any error, never raises."""
        try:
            if not records:
                return True
            data = "".join(_dumps(r) + "\n" for r in records).encode("utf-8")
        except Exception as exc:  # logging must never break the caller's decision
            with self._lock:
                self._fail("record encoding", exc)
            return False
        return self._append_data(data, len(records))

    def _append_data(self, data: bytes, n_records: int) -> bool:
        """Write ``n_records`` encoded lines in one write; False (and counted) on any error, never raises."""
        with self._lock:
            try:
                self._write(data)
            except PartialWriteError as exc:
                self._fail("partial write", exc)
                return False
            except (NotARegularFileError, IsADirectoryError) as exc:
                self._fail("open", exc)
                return False
            except Exception as exc:
                self._fail("write", exc)
                return False
            self.n_records += n_records
            return True

    def log_decisions(
        self,
        decisions: Mapping[str, Any],
        *,
        decision_id: str | None,
        policy_hash: str,
        policy_version: str,
        model: Any,
        schema_hash: str | None,
        probs: Mapping[str, Sequence[float] | None],
        time: datetime | None = None,
    ) -> bool:
        """Write one line per question decision (objects with ``action``/``option``/``p_top``/``margin``).

        The lines are those of :meth:`append` on the records, byte for byte (each field's text as the JSON
        encoder writes it); a float64 ``probs`` array is written with :func:`_probs_text` (each value's
        ``repr``, remembered across calls).
        """
        try:
            if time is None and self.clock is None:  # now: the date and second formatted once per second
                sec, us = divmod(_time_ns() // 1000, 1_000_000)
                cached = self._second
                if cached[0] != sec:
                    cached = self._second = (sec, datetime.fromtimestamp(sec, UTC).isoformat()[:19])
                stamp = f"{cached[1]}.{us:06d}+00:00"  # = datetime.now(UTC).isoformat(timespec="microseconds")
            else:
                when = time or self.clock()  # type: ignore[misc]
                stamp = (when if when.tzinfo is UTC else when.astimezone(UTC)).isoformat(timespec="microseconds")
            did = decision_id if decision_id is not None else new_decision_id()
            # the encoder's text of each field (same order, separators and escapes as _dumps(record))
            shared = (
                f'"policy_hash":{_json(policy_hash)},"policy_version":{_json(policy_version)},'
                f'"model":{_json(model if isinstance(model, str) or model is None else str(model))},'
                f'"schema_hash":{_json(schema_hash)}'
            )
            head = f'{{"decision_id":{_json(str(did))},"time":{_json(stamp)},{shared},"question":'
            lines = []
            for qid, d in decisions.items():
                p = probs.get(qid)
                text = None if p is None else _probs_text(p)
                if text is None:
                    text = _json(None if p is None else _probs_list(p))
                lines.append(
                    f'{head}{_json(qid)},"action":{_json(d.action)},"option":{_json(d.option)},'
                    f'"would_accept":{_json(getattr(d, "would_accept", None))},"p_top":{_json_float(d.p_top)},'
                    f'"margin":{_json_float(d.margin)},"probs":{text}}}'
                )
            data = "".join(line + "\n" for line in lines).encode("utf-8")
        except Exception as exc:
            with self._lock:
                self._fail("record encoding", exc)
            return False
        if not lines:
            return True
        return self._append_data(data, len(lines))

    def close(self) -> None:
        with self._lock:
            try:
                self._close_fd()
            finally:
                if self._lk is not None and self._lk >= 0:
                    lk, self._lk = self._lk, None
                    os.close(lk)

    def __enter__(self) -> DecisionLog:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def stats(self) -> dict:
        return {
            "path": str(self.path),
            "n_records": self.n_records,
            "n_errors": self.n_errors,
            "n_rotations": self.n_rotations,
            "last_error": self.last_error,
        }


def _numbered(path: str | os.PathLike) -> tuple[list[tuple[int, Path]], list[tuple[int, Path]]]:
    """The rotated files of a log, as (number, path): the older layout's and the numbered backups."""
    p = Path(path)
    try:
        names = os.listdir(p.parent)
    except OSError:
        return [], []
    prefix = p.name + "."
    old: list[tuple[int, Path]] = []
    new: list[tuple[int, Path]] = []
    for name in names:
        suffix = name[len(prefix) :] if name.startswith(prefix) else ""
        if _DIGITS.fullmatch(suffix):
            (new if len(suffix) >= BACKUP_DIGITS else old).append((int(suffix), p.with_name(name)))
    return old, new


def _backups(path: str | os.PathLike) -> list[Path]:
    old, new = _numbered(path)
    return [f for _, f in sorted(old, reverse=True)] + [f for _, f in sorted(new)]


def log_files(path: str | os.PathLike) -> list[Path]:
    """The log and its rotated files, oldest first, each once.

    The older layout's backups (``PATH.N`` … ``PATH.1``), then the numbered ones (``PATH.00000001``,
    ``PATH.00000002``, …), then ``PATH``.
    """
    p = Path(path)
    return [*_backups(p), *([p] if p.exists() else [])]


def _records(lines: Iterable[bytes], name: str | os.PathLike) -> Iterator[dict]:
    """The strict JSON objects among ``lines``: a line that is not UTF-8, not JSON, or JSON that strict readers
    refuse (NaN/Infinity, a key named twice: two readers could see two different records) is skipped with the
    torn line's warning, as is a JSON value that is not an object."""
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rec = loads_strict(raw.decode("utf-8"))
        except (StrictJSONError, UnicodeDecodeError):
            rec = None
        if not isinstance(rec, dict):
            warnings.warn(f"{name}: line {n} is not a JSON object (torn by a crash?); skipped", stacklevel=3)
            continue
        yield rec


def iter_decision_log(path: str | os.PathLike) -> Iterator[dict]:
    """Records of one log file in order; lines that are not a strict JSON object (a torn line; NaN, a key named
    twice: :func:`workbench_runtime.jsonio.loads_strict`) are skipped with a warning."""
    with open(path, "rb") as fh:
        yield from _records(fh, path)


def open_decision_log(path: str | os.PathLike) -> list[tuple[Path, IO[bytes]]]:
    """Every file of a log, oldest first, opened under the log's shared lock (a consistent set of files).

    A rotation cannot run while the files are listed and opened, so each record is in exactly one of
    them; records appended after the call may or may not be read. Close the handles when done.
    """
    p = Path(path)
    lk = -1
    if fcntl is not None:
        try:
            lk = os.open(lock_path(p), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            lk = -1  # no writer with a lock has used this log (or it is not readable): list it as it is
    try:
        if lk >= 0:
            fcntl.flock(lk, fcntl.LOCK_SH)
        out: list[tuple[Path, IO[bytes]]] = []
        for f in log_files(p):
            try:
                out.append((f, open(f, "rb")))
            except FileNotFoundError:  # deleted by a writer without the lock (an older runtime)
                continue
        return out
    finally:
        if lk >= 0:
            os.close(lk)


def read_decision_log(path: str | os.PathLike) -> list[dict]:
    """Every record of a log and its rotated files, oldest first, each once (torn lines and lines strict JSON
    refuses skipped with a warning, as by :func:`iter_decision_log`)."""
    out: list[dict] = []
    handles = open_decision_log(path)
    try:
        for f, fh in handles:
            out.extend(_records(fh, f))
    finally:
        for _, fh in handles:
            fh.close()
    return out
