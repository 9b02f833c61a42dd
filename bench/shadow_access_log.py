"""CPU of the collector's access-log intake when most log lines are never claimed (a sampled mirror:
`split_clients` sends 10% of requests to the collector, nginx logs all of them).

    python bench/shadow_access_log.py [--lines 50000]
"""

from __future__ import annotations

import argparse
import json
import time

from workbench.shadow.collector import AccessLog


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=50_000)
    args = ap.parse_args()
    log = AccessLog(keep_for=60.0)  # 2 x the default champion timeout: nothing expires during the run
    datagrams = [
        b"<190>Dec  7 02:00:00 workbench: "
        + json.dumps({"request_id": f"{i:032x}", "upstream_status": "200", "upstream_response_time": "0.012"}).encode()
        for i in range(args.lines)
    ]
    t0 = time.process_time()
    for d in datagrams:
        log.datagram_received(d, ("127.0.0.1", 0))
    cpu = time.process_time() - t0
    print(f"{args.lines} unclaimed log lines: {cpu:.2f} CPU s ({cpu / args.lines * 1e6:.1f} us per line)")


if __name__ == "__main__":
    main()
