"""Load for chaos scenarios, run in a pod: an idempotent acks=all producer of sequence records
("<partition>:<seq>") at RATE per second until SIGTERM (or DURATION seconds), then a flush of
everything outstanding. With MAX_OUTSTANDING it sends no more while that many records await their
acknowledgement (a closed loop: a cluster slower than RATE slows the producer instead of growing its
queue and every record's wait). One line per acknowledgement:
    ACK <partition> <offset> <seq> <produced at> <acknowledged at>
(offset "None" when librdkafka acknowledged the record implicitly: a request with an uncertain
outcome followed by a later one of the partition that succeeded),
and ERR lines for records that failed for good. Times are time.time(): the pods and the test share
one clock (one machine)."""

import json
import os
import signal
import sys
import time

from confluent_kafka import Producer

bootstrap = os.environ["BOOTSTRAP"]
# Security and other client properties (JSON); $VARS in values come from the environment (a password
# from a Secret).
client_config = {k: os.path.expandvars(str(v))
                 for k, v in json.loads(os.environ.get("CLIENT_CONFIG", "{}")).items()}
topic = os.environ["TOPIC"]
partitions = int(os.environ.get("PARTITIONS", "3"))
duration = float(os.environ.get("DURATION", "3600"))
rate = float(os.environ.get("RATE", "200"))
max_outstanding = int(os.environ.get("MAX_OUTSTANDING", "0"))  # 0: open loop, the queue grows as it must
stopping = False


def stop(*_):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, stop)
producer = Producer({
    **client_config, "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
    "message.timeout.ms": 300_000, "retry.backoff.ms": 50, "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    # A connect to a restarted broker's old address gets no answer: resolve again after 5 s, not 30.
    "socket.connection.setup.timeout.ms": 5000,
})
out = sys.stdout


def report(err, msg, seq, sent):
    if err is not None:
        out.write(f"ERR {msg.partition()} {seq} {err}\n")
    else:
        out.write(f"ACK {msg.partition()} {msg.offset()} {seq} {sent:.4f} {time.time():.4f}\n")


start = time.time()
print(f"START {start:.4f}", flush=True)
seq = 0
while not stopping and time.time() - start < duration:
    if max_outstanding and len(producer) >= max_outstanding:
        producer.poll(0.1)
        continue
    partition = seq % partitions
    sent = time.time()
    try:
        producer.produce(topic, f"{partition}:{seq}".encode(), partition=partition,
                         on_delivery=lambda err, msg, seq=seq, sent=sent: report(err, msg, seq, sent))
        seq += 1
    except BufferError:  # librdkafka's own queue is full: wait for acknowledgements, not in a busy loop
        producer.poll(0.1)
        continue
    producer.poll(0)
    time.sleep(max(0.0, start + seq / rate - time.time()))
    out.flush()
# The flush must end inside the pod's grace period (Workload passes it), or the kubelet's SIGKILL comes
# first and takes the DONE line with it: records still unacknowledged then are counted as unflushed.
grace_s = float(os.environ.get("DM_GRACE_S", "120"))
remaining = producer.flush(max(5.0, grace_s - 30))
print(f"DONE produced={seq} unflushed={remaining} {time.time():.4f}", flush=True)
sys.exit(1 if remaining else 0)
