"""Asks a cluster's controller, through the operator Service, who it is, every INTERVAL seconds until
SIGTERM. One line per answer:
    PROBE <time> <HTTP status, or 0 without an answer> <controller incarnation, or ->
A new incarnation is another controller: the standby operator's, after a takeover."""

import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

url = os.environ["URL"]
token = os.environ["TOKEN"]
interval = float(os.environ.get("INTERVAL", "0.05"))
stopping = False


def stop(*_):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, stop)
print("READY", flush=True)
while not stopping:
    status, incarnation = 0, "-"
    try:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=1) as resp:
            status, incarnation = resp.status, json.loads(resp.read()).get("incarnation", "-")
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:
        pass
    sys.stdout.write(f"PROBE {time.time():.3f} {status} {incarnation}\n")
    sys.stdout.flush()
    time.sleep(interval)
print("DONE", flush=True)
