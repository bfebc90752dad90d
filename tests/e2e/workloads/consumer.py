"""Reads every partition of TOPIC from the beginning, in a pod, until SIGTERM; then goes on until
UNTIL_EMPTY seconds pass without a record (what the producer flushed last) and exits. One line per
record:
    REC <partition> <offset> <value>
and lines starting with "#" for errors and, at the end, each partition's position."""

import json
import os
import signal
import sys
import time

from confluent_kafka import Consumer, TopicPartition

bootstrap = os.environ["BOOTSTRAP"]
# Security and other client properties (JSON); $VARS in values come from the environment (a password
# from a Secret).
client_config = {k: os.path.expandvars(str(v))
                 for k, v in json.loads(os.environ.get("CLIENT_CONFIG", "{}")).items()}
topic = os.environ["TOPIC"]
partitions = int(os.environ.get("PARTITIONS", "3"))
quiet = float(os.environ.get("UNTIL_EMPTY", "10"))
draining = False


def drain(*_):
    global draining
    draining = True


signal.signal(signal.SIGTERM, drain)
# A connect to a restarted broker's old address (resolved just before the pod went) gets no answer:
# give up after 5 s and resolve again, not librdkafka's 30 s, longer than UNTIL_EMPTY.
consumer = Consumer({**client_config, "bootstrap.servers": bootstrap,
                     "group.id": f"verify-{os.getpid()}-{time.time()}",
                     "enable.auto.commit": False, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
                     "socket.connection.setup.timeout.ms": 5000})
consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
last = time.time()
out = sys.stdout
count = 0
while not (draining and time.time() - last > quiet):
    msg = consumer.poll(0.5)
    if msg is not None and not msg.error():
        out.write(f"REC {msg.partition()} {msg.offset()} {msg.value().decode()}\n")
        count += 1
        last = time.time()
    elif msg is not None:
        out.write(f"# {msg.error()}\n")
    out.flush()
# Where each partition stands, for a report when records are missing: a consumer stuck on one.
# Past a few dozen partitions, the watermarks the last fetches brought (one request each would take
# minutes at 2,000 partitions, longer than the pod's grace period).
cached = partitions > 50
for tp in consumer.position([TopicPartition(topic, p) for p in range(partitions)]):
    try:
        low, high = consumer.get_watermark_offsets(tp, timeout=5, cached=cached)
    except Exception as exc:  # a diagnostic only
        low = high = f"unknown ({exc})"
    print(f"# partition {tp.partition}: position {tp.offset}, log start {low}, high watermark {high}")
consumer.close()
print(f"DONE read={count}", flush=True)
