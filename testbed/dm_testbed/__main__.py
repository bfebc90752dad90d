"""`python -m dm_testbed up|down|env|leftovers` (make k8s-up / k8s-down): the control plane for tests
that need an API server and no nodes."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys

from . import cleanup
from .client import Testbed, TestbedError
from .settings import TestbedSettings


def _exports(settings: TestbedSettings) -> str:
    return f"export KUBECONFIG={settings.kubeconfig} PATH={settings.bin_dir}:$PATH"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dm_testbed", description="dm's Kubernetes testbed")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the testbed (in the background unless --foreground)")
    up.add_argument("--foreground", action="store_true", help="run the supervisor in this process")
    up.add_argument("--owner-pid", type=int, help="stop when this process exits")
    sub.add_parser("down", help="stop the testbed and remove everything it created")
    sub.add_parser("env", help="print the export line for kubectl and helm")
    sub.add_parser("leftovers", help="list anything a testbed run left on this machine")
    args = parser.parse_args(argv)
    settings = TestbedSettings.from_env()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    try:
        if args.command == "up":
            if args.foreground:
                from .supervisor import run

                asyncio.run(run(settings, args.owner_pid))
                return 0
            tb = Testbed.start(settings)
            state = tb.state
            print(f"dm testbed ready in {state.get('startup_seconds')}s: API server {state.get('server')}")
            print(_exports(settings))
            return 0
        if args.command == "down":
            was_running = cleanup.stop_supervisor(settings)
            found = cleanup.clean(settings, keep_logs=True)
            left = cleanup.leftovers(settings)
            if left:
                print(f"dm testbed: could not remove {left}", file=sys.stderr)
                return 1
            print("dm testbed stopped" if was_running or found else "dm testbed was not running")
            return 0
        if args.command == "env":
            print(_exports(settings))
            return 0
        if args.command == "leftovers":
            left = cleanup.leftovers(settings)
            print(json.dumps(left, indent=2))
            return 1 if left else 0
        return 0
    except TestbedError as exc:
        print(f"dm testbed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
