"""A decision-log writer process for the tests: ``python log_writer.py PACKAGE_ROOT JSON_ARGS``.

``PACKAGE_ROOT`` is the directory holding the ``workbench_runtime`` the tests import (the checkout's
``runtime/`` or site-packages), so the child writes with the same code. ``JSON_ARGS``:

- ``path``, ``prefix``, ``n``: append ``n`` decisions (one record each, ids ``PREFIX-0`` …) to ``path``
- ``rotate_bytes``, ``backups``: the log's settings
- ``start``: a file to wait for before writing (so that the writers overlap)
- ``fsize``: a ``RLIMIT_FSIZE`` soft limit (bytes) to write under, lifted again after ``n_limited``
  decisions (``SIGXFSZ`` ignored, so a write past the limit is partial or fails with EFBIG)

Prints one JSON object: ``n_records``, ``n_errors``, ``ok`` (the ids whose ``log_decisions`` returned
true, when asked with ``list_ok``) and ``warnings`` (the messages of the log's logger).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from types import SimpleNamespace


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    args = json.loads(sys.argv[2])
    from workbench_runtime import DecisionLog

    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logging.getLogger("workbench_runtime.decision_log").addHandler(Keep())
    log = DecisionLog(args["path"], rotate_bytes=args.get("rotate_bytes"), backups=args.get("backups"))
    decision = SimpleNamespace(action="accept", option="a", would_accept=None, p_top=0.9, margin=0.5)
    probs = {"q": [0.9, 0.05, 0.05]}
    start = args.get("start")
    while start and not os.path.exists(start):
        time.sleep(0.001)
    limited = args.get("fsize")
    if limited:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (limited, hard))
    ok = []
    for i in range(args["n"]):
        if limited and i == args["n_limited"]:
            resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        did = f"{args['prefix']}-{i}"
        if log.log_decisions(
            {"q": decision},
            decision_id=did,
            policy_hash="sha256:test",
            policy_version="1",
            model="m",
            schema_hash=None,
            probs=probs,
        ) and args.get("list_ok"):
            ok.append(did)
    log.close()
    print(json.dumps({"n_records": log.n_records, "n_errors": log.n_errors, "ok": ok, "warnings": messages}))


if __name__ == "__main__":
    main()
