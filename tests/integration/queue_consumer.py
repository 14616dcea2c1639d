"""A consumer process for the crash tests: claims one job, renews its lease from a thread, reports
the claim on stdout, then "works" until it is killed (``kill -9``: no cleanup of any kind).

Usage: python -m tests.integration.queue_consumer BACKEND LOCATION LEASE_TTL_S WORKER_ID
"""

from __future__ import annotations

import json
import sys
import threading
import time

from tests.integration.queue_support import open_backend


def main() -> None:
    backend, location, lease_ttl_s, worker_id = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    queue = open_backend(backend, location, lease_ttl_s=lease_ttl_s)
    claim = queue.claim(worker_id, ["tiny-wan"], block_s=30)
    if claim is None:
        print(json.dumps({"error": "nothing to claim"}), flush=True)
        sys.exit(1)

    def renew_forever() -> None:
        while True:
            time.sleep(lease_ttl_s / 4)
            if not queue.renew(claim):
                print(json.dumps({"error": "lease lost"}), flush=True)

    threading.Thread(target=renew_forever, daemon=True).start()
    print(json.dumps({"job_id": claim.job_id, "attempt": claim.attempt}), flush=True)
    while True:  # the "GPU job": runs until the test kills the process
        time.sleep(1)


if __name__ == "__main__":
    main()
