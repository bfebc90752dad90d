"""Traffic for the monitoring e2e (tests/e2e/test_monitoring.py), in one pod until SIGTERM:
- a producer writing RATE records a second to TOPIC;
- a transactional producer committing a transaction of a few records to TOPIC every second;
- a consumer in group GROUP that reads what is there, commits once, then pauses every partition and
  only keeps polling: it stays a member, and its lag grows (the stalled consumer the lag alert is about);
- a healthy consumer in group GROUP-healthy that keeps up and commits every second (the dashboards'
  offset commit rate has data whichever broker coordinates it, also after that broker restarted).
Prints READY once the group has committed, then "ACKS <n>" every 5 seconds."""

import os
import signal
import time

from confluent_kafka import Consumer, Producer

bootstrap = os.environ["BOOTSTRAP"]
topic = os.environ["TOPIC"]
group = os.environ["GROUP"]
rate = float(os.environ.get("RATE", "100"))
stopping = False


def stop(*_):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, stop)
common = {"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 5000,
          "reconnect.backoff.max.ms": 500}
producer = Producer({**common, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                     "message.timeout.ms": 300_000})
txn = Producer({**common, "transactional.id": "monitored-txn", "transaction.timeout.ms": 60_000})
txn.init_transactions(60)
consumer = Consumer({**common, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": 30_000})


def on_assign(c, partitions):
    c.assign(partitions)
    if committed:  # after a rebalance, too: stalled
        c.pause(partitions)


reader = Consumer({**common, "group.id": f"{group}-healthy", "auto.offset.reset": "latest",
                   "enable.auto.commit": False, "session.timeout.ms": 30_000})
reader.subscribe([topic])
committed = False
consumer.subscribe([topic], on_assign=on_assign)
acks = 0


def acked(err, _msg):
    global acks
    acks += err is None


for i in range(50):  # something for the consumer to read before it stalls
    producer.produce(topic, f"warm-{i}".encode(), on_delivery=acked)
producer.flush(60)
read, reading_until = 0, time.time() + 60
while not stopping and read < 50 and time.time() < reading_until:  # every partition read: each has a lag
    msg = consumer.poll(1)
    read += msg is not None and msg.error() is None
if read:
    consumer.commit(asynchronous=False)
consumer.pause(consumer.assignment())
committed = True
print("READY", flush=True)

seq, last_txn, last_report, last_commit, unread = 0, 0.0, time.time(), 0.0, 0
while not stopping:
    started = time.time()
    for _ in range(max(1, int(rate / 10))):
        producer.produce(topic, f"rec-{seq}".encode(), key=str(seq % 16).encode(), on_delivery=acked)
        seq += 1
    producer.poll(0)
    consumer.poll(0)  # a paused member polls: it stays in the group, reads nothing and commits nothing
    unread += sum(1 for m in reader.consume(1000, 0) if m.error() is None)
    if unread and started - last_commit >= 1:
        try:
            reader.commit(asynchronous=False)
        except Exception as exc:  # a coordinator moving: the next second commits again
            print(f"healthy commit failed: {exc}", flush=True)
        unread, last_commit = 0, started
    if started - last_txn >= 1:
        txn.begin_transaction()
        for i in range(3):
            txn.produce(topic, f"txn-{seq}-{i}".encode())
        txn.commit_transaction(30)
        last_txn = started
    if started - last_report >= 5:
        print(f"ACKS {acks}", flush=True)
        last_report = started
    time.sleep(max(0.0, 0.1 - (time.time() - started)))
producer.flush(60)
consumer.close()
reader.close()
print(f"DONE {acks}", flush=True)
