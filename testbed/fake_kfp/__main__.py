"""``python -m testbed.fake_kfp``: the fake KFP API server on 127.0.0.1, to try ``kftrain submit`` and
``kftrain schedule`` without a cluster. It prints the ``--host`` to pass, then one line per request it answers, until
Ctrl-C (or SIGTERM). What it is sent stays in memory: nothing runs, a run only moves through its states."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from testbed.fake_kfp.server import FakeKFP


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.fake_kfp", description=__doc__)
    parser.parse_args(argv)
    fake = FakeKFP().start()
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print(f"fake KFP API server: {fake.url} (in memory; Ctrl-C stops it). Try:", flush=True)
    print(f"  kftrain submit pytorch-digits --host {fake.url} --wait", flush=True)
    print(f"  kftrain schedule create pytorch-digits --host {fake.url} --cron '0 0 3 * * *'", flush=True)
    print(f"  kftrain schedule list --host {fake.url}", flush=True)
    shown = 0
    try:
        while not stop.wait(0.1):
            with fake.lock:
                new = fake.requests[shown:]
            for request in new:
                print(f"{request.method} {request.path}", flush=True)
            shown += len(new)
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
