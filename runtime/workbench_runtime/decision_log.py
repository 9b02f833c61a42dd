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

- **never breaks or slows the caller**: every error (disk full, permissions, a value that is not
  JSON) is swallowed and counted (``n_errors``, ``last_error``); the caller's decision is returned
  unchanged. A decision's lines are written with one ``write`` on an ``O_APPEND`` descriptor
  (no buffering to lose, no interleaving with other writers' records on a local file system).
- **rotation**: when the file would grow past ``rotate_bytes`` it is renamed ``PATH.1`` (older
  files shift to ``.2``, ``.3``, … and beyond ``backups`` are deleted) and a new file is started.
- **crash safety**: a crash mid-write leaves at most a torn last line. On reopening, a file that
  does not end with a newline gets one, so the fragment stays alone on its line; readers
  (:func:`read_decision_log`, ``workbench monitor``) skip it with a warning.

Standard library only.
"""

from __future__ import annotations

import json
import math
import os
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: Default size at which a log file is rotated (64 MiB).
ROTATE_BYTES = 64 * 2**20

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def new_decision_id() -> str:
    """A random decision id (32 hex digits) for callers that have none of their own."""
    return uuid.uuid4().hex


def _finite(x: Any) -> float | None:
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


class DecisionLog:
    """Append-only JSON Lines log of question decisions with size-based rotation.

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
        self.clock = clock
        self.rotate_bytes = rotate_bytes
        self.backups = backups
        self.fsync = fsync
        self.n_records = 0
        self.n_errors = 0
        self.n_rotations = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size = 0

    # -- file handling ---------------------------------------------------------------------------------
    def _open(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        if size:
            with open(self.path, "rb") as fh:  # a torn last line from a crash: end it
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    size += os.write(fd, b"\n")
        self._fd, self._size = fd, size
        return fd

    def _rotate(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        n = 1
        while self.path.with_name(f"{self.path.name}.{n}").exists():
            n += 1
        for i in range(n - 1, 0, -1):  # shift .i -> .i+1, oldest first
            src = self.path.with_name(f"{self.path.name}.{i}")
            if self.backups is not None and i >= self.backups:
                src.unlink()
            else:
                src.rename(self.path.with_name(f"{self.path.name}.{i + 1}"))
        if self.backups == 0:
            self.path.unlink()
        else:
            self.path.rename(self.path.with_name(f"{self.path.name}.1"))
        self.n_rotations += 1

    def _write(self, data: bytes) -> None:
        with self._lock:
            fd = self._fd if self._fd is not None else self._open()
            if self.rotate_bytes is not None and self._size and self._size + len(data) > self.rotate_bytes:
                self._rotate()
                fd = self._open()
            self._size += os.write(fd, data)
            if self.fsync:
                os.fsync(fd)

    # -- writing ---------------------------------------------------------------------------------------
    def append(self, records: Sequence[Mapping[str, Any]]) -> bool:
        """Append records (one line each) in one write; False (and counted) on any error, never raises."""
        try:
            if not records:
                return True
            self._write("".join(_dumps(r) + "\n" for r in records).encode("utf-8"))
            self.n_records += len(records)
            return True
        except Exception as exc:  # logging must never break the caller's decision
            self.n_errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return False

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
        """Write one line per question decision (objects with ``action``/``option``/``p_top``/``margin``)."""
        try:
            when = time or (self.clock() if self.clock is not None else datetime.now(UTC))
            stamp = when.astimezone(UTC).isoformat(timespec="microseconds")
            did = decision_id if decision_id is not None else new_decision_id()
            records = []
            for qid, d in decisions.items():
                p = probs.get(qid)
                records.append(
                    {
                        "decision_id": str(did),
                        "time": stamp,
                        "policy_hash": policy_hash,
                        "policy_version": policy_version,
                        "model": model if isinstance(model, str) or model is None else str(model),
                        "schema_hash": schema_hash,
                        "question": qid,
                        "action": d.action,
                        "option": d.option,
                        "would_accept": getattr(d, "would_accept", None),
                        "p_top": _finite(d.p_top),
                        "margin": _finite(d.margin),
                        "probs": None if p is None else (p.tolist() if hasattr(p, "tolist") else [float(v) for v in p]),
                    }
                )
        except Exception as exc:
            self.n_errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return False
        return self.append(records)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                try:
                    os.close(self._fd)
                finally:
                    self._fd = None

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


def log_files(path: str | os.PathLike) -> list[Path]:
    """The log and its rotated files, oldest first (``PATH.N`` … ``PATH.1``, ``PATH``)."""
    p = Path(path)
    rotated = []
    n = 1
    while p.with_name(f"{p.name}.{n}").exists():
        rotated.append(p.with_name(f"{p.name}.{n}"))
        n += 1
    return [*reversed(rotated), *([p] if p.exists() else [])]


def iter_decision_log(path: str | os.PathLike) -> Iterator[dict]:
    """Records of one log file in order; lines that are not a JSON object (a torn line) are skipped with a warning."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                rec = None
            if not isinstance(rec, dict):
                warnings.warn(f"{path}: line {n} is not a JSON object (torn by a crash?); skipped", stacklevel=2)
                continue
            yield rec


def read_decision_log(path: str | os.PathLike) -> list[dict]:
    """Every record of a log and its rotated files, oldest first (torn lines skipped with a warning)."""
    return [rec for f in log_files(path) for rec in iter_decision_log(f)]
