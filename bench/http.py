"""The REST Proxy against the Kafka protocol on one broker, in the same run (issue 27).

    .venv/bin/python -m bench.http [--records 100000] [--partitions 6] [--concurrency 4]
                                   [--client raw|aiohttp|both] [--repeat 1] [--warm-memory GB] [--floor] [--plot]

1. Kafka protocol: `dm bench produce` (confluent-kafka), 1 KiB records, acks=all, into one topic.
2. HTTP: POST /topics/{t} with batches of 100 binary (base64) 1 KiB records and no partition (the broker
   chooses, round robin), `--concurrency` requests at once; every record is acknowledged by the in-sync
   replicas before its answer, and every answer is checked (status, one offset and no error per record).
   `--client raw` (the default) sends them over kept-alive HTTP/1.1 connections with the request bytes
   built once, so the figure is the broker's and not the Python HTTP client's (aiohttp's client costs
   more CPU per record than the broker's Kafka path, on the same two cores); `--client aiohttp`, and
   `--client both` for the two in the same run.
   `--floor` adds, in every round, the same raw client against bench.http_floor: a process that only reads,
   parses, encodes and writes each request with dm's own pieces and answers it (no Produce path, no log):
   the most an in-process REST Proxy could reach on this machine, as a ratio to the Kafka protocol too.
3. Consume: `dm bench consume` against a REST consumer instance reading the same records with
   GET …/records (4 MB at most per answer); its rate counts from the first records, after the instance
   joined its group (group.initial.rebalance.delay.ms, 3 s as in Kafka, is reported apart).

The HTTP client runs in this process and the Kafka client (librdkafka) in a `dm bench` process, each beside
the broker on the same machine. Each phase also reports the broker's CPU per record (and the HTTP client's).
Appends to bench/results/http.jsonl; --plot draws docs/bench/http.png.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

from .brokers import cpu_per_record, dm_bench, dm_broker, free_port, wait_port, warm_memory

RESULTS = Path(__file__).parent / "results" / "http.jsonl"
PLOT = Path(__file__).parent.parent / "docs" / "bench" / "http.png"
BATCH = 100
RECORD = 1024


async def http_produce(url: str, topic: str, records: int, concurrency: int) -> dict:
    import aiohttp

    body = produce_body()
    headers = {"Content-Type": "application/vnd.kafka.binary.v2+json"}
    batches = records // BATCH
    latencies: list[float] = []
    errors = 0
    next_batch = iter(range(batches))

    async with aiohttp.ClientSession() as session:
        async def worker() -> None:
            nonlocal errors
            for _ in next_batch:
                sent = time.perf_counter()
                async with session.post(f"{url}/topics/{topic}", data=body, headers=headers) as answer:
                    result = await answer.json()
                latencies.append(time.perf_counter() - sent)
                if not _answered_each_record(answer.status, result):
                    errors += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return _result(batches, elapsed, latencies, errors)


def produce_body() -> bytes:
    value = base64.b64encode(bytes(range(256)) * (RECORD // 256)).decode()
    return json.dumps({"records": [{"value": value} for _ in range(BATCH)]}).encode()


def _result(batches: int, elapsed: float, latencies: list[float], errors: int) -> dict:
    latencies.sort()
    sent = batches * BATCH
    return {"records": sent, "seconds": round(elapsed, 2),
            "records_per_s": round(sent / elapsed), "mb_per_s": round(sent * RECORD / elapsed / 1e6, 1),
            "request_p50_ms": round(statistics.median(latencies) * 1000, 1),
            "request_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 1), "failed_batches": errors}


def _answered_each_record(status: int, answer: dict) -> bool:
    offsets = answer.get("offsets") or []
    return status == 200 and len(offsets) == BATCH and all(o["error_code"] is None and o["offset"] is not None
                                                           for o in offsets)


async def raw_http_produce(host: str, port: int, topic: str, records: int, concurrency: int) -> dict:
    """http_produce over kept-alive HTTP/1.1 connections of asyncio streams, each request's bytes built once;
    every answer is read whole (Content-Length) and checked as http_produce checks it."""
    body = produce_body()
    request = (f"POST /topics/{topic} HTTP/1.1\r\nHost: {host}:{port}\r\n"
               f"Content-Type: application/vnd.kafka.binary.v2+json\r\nAccept: application/vnd.kafka.v2+json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    batches = records // BATCH
    next_batch = iter(range(batches))
    latencies: list[float] = []
    errors = 0

    async def connection() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, port)
        try:
            for _ in next_batch:
                sent = time.perf_counter()
                writer.write(request)
                head = (await reader.readuntil(b"\r\n\r\n")).lower()
                start = head.index(b"content-length:") + len(b"content-length:")
                length = int(head[start:head.index(b"\r\n", start)])
                answer = orjson.loads(await reader.readexactly(length))
                latencies.append(time.perf_counter() - sent)
                if not _answered_each_record(int(head[9:12]), answer):
                    errors += 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(concurrency)))
    return _result(batches, time.perf_counter() - started, latencies, errors)


async def http_consume(url: str, topic: str, records: int) -> dict:
    import aiohttp

    v2 = {"Content-Type": "application/vnd.kafka.v2+json"}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/consumers/bench-http", headers=v2,
                                json={"format": "binary", "auto.offset.reset": "earliest"}) as answer:
            base = (await answer.json())["base_uri"]
        async with session.post(base + "/subscription", headers=v2, json={"topics": [topic]}) as answer:
            assert answer.status == 204, await answer.text()
        read = first = 0
        started = time.perf_counter()
        flowing = 0.0  # when the first records came: joining the group (its initial rebalance delay) is apart
        while read < records:
            async with session.get(base + "/records?timeout=1000&max_bytes=4000000",
                                   headers={"Accept": "application/vnd.kafka.binary.v2+json"}) as answer:
                got = len(await answer.json())
            if got and not flowing:
                flowing, first = time.perf_counter(), got
            read += got
            if time.perf_counter() - started > 300:
                break
        elapsed = time.perf_counter() - flowing
        await session.delete(base)
    timed = read - first
    return {"records": read, "first_records_after_s": round(flowing - started, 2), "seconds": round(elapsed, 2),
            "records_per_s": round(timed / elapsed), "mb_per_s": round(timed * RECORD / elapsed / 1e6, 1)}


def create(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"keyless.partitioner": "round_robin"}
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(15)


def with_client_cpu(records: int, run: Callable[[], dict]) -> dict:
    """`run()`'s result with this process's CPU per record (`client_cpu_us_per_record`): the HTTP client
    runs here (the Kafka client's is librdkafka's, in `dm bench`)."""
    before = time.process_time()
    result = run()
    return result | {"client_cpu_us_per_record": round((time.process_time() - before) / records * 1e6, 2)}


@contextlib.contextmanager
def floor_server() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """bench.http_floor in a process of its own (as the broker is), on a free port."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dm-http-floor-") as directory:
        proc = subprocess.Popen([sys.executable, "-m", "bench.http_floor", "--port", str(port), "--dir", directory],
                                stdout=subprocess.DEVNULL)
        try:
            wait_port(port)
            yield port, proc
        finally:
            proc.terminate()
            proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=4, help="HTTP produce requests in flight")
    parser.add_argument("--client", choices=("raw", "aiohttp", "both"), default="raw",
                        help="the HTTP produce client: raw HTTP/1.1 over asyncio streams, aiohttp, or both in turn")
    parser.add_argument("--repeat", type=int, default=1,
                        help="produce rounds (Kafka, then HTTP, each --records); the round of the median ratio is "
                             "reported, with every round's figures")
    parser.add_argument("--warm-memory", type=float, default=0, metavar="GB",
                        help="touch this much memory before each phase, so that page-cache pages are not first-touch "
                        "host faults on a VM with free page reporting (bench.brokers.warm_memory)")
    parser.add_argument("--floor", action="store_true",
                        help="also measure the raw client against bench.http_floor (the least a request can cost)")
    parser.add_argument("--label", default="")
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()
    rest_port = free_port()
    with dm_broker(f"http.listeners=HTTP://127.0.0.1:{rest_port}") as (bootstrap, broker):
        wait_port(rest_port)
        url = f"http://127.0.0.1:{rest_port}"
        create(bootstrap, "bench-kafka", args.partitions)
        create(bootstrap, "bench-http", args.partitions)
        def costs(run: Callable[[], dict]) -> dict:
            warm_memory(args.warm_memory)
            return cpu_per_record([broker.pid], args.records, run)

        clients = {"raw": lambda: raw_http_produce("127.0.0.1", rest_port, "bench-http", args.records,
                                                   args.concurrency),
                   "aiohttp": lambda: http_produce(url, "bench-http", args.records, args.concurrency)}
        chosen = ["raw", "aiohttp"] if args.client == "both" else [args.client]
        rounds = []
        for _ in range(args.repeat):  # each round's phases one after the other: the VM's drift hits them alike
            kafka = costs(lambda: dm_bench("produce", bootstrap, "--topic", "bench-kafka", "--records",
                                           str(args.records), "--record-size", str(RECORD), "--acks", "all",
                                           "--partitions", str(args.partitions), "--warm-up"))
            http_runs = {name: costs(lambda name=name: with_client_cpu(args.records,
                                                                       lambda: asyncio.run(clients[name]())))
                         for name in chosen}
            if args.floor:
                with floor_server() as (port, floor):
                    def floor_run(port: int = port) -> dict:
                        return asyncio.run(raw_http_produce("127.0.0.1", port, "floor", args.records,
                                                            args.concurrency))

                    asyncio.run(raw_http_produce("127.0.0.1", port, "floor", args.records // 10, args.concurrency))
                    warm_memory(args.warm_memory)
                    http_runs["floor"] = cpu_per_record([floor.pid], args.records, floor_run)
            rounds.append((kafka, http_runs))
        # the round of the median ratio stands for the run; every round's figures are kept
        rounds.sort(key=lambda r: r[1][chosen[0]]["records_per_s"] / r[0]["records_per_s"])
        kafka, http_runs = rounds[len(rounds) // 2]
        http = http_runs[chosen[0]]
        kafka_read = costs(lambda: dm_bench("consume", bootstrap, "--topic", "bench-http", "--records",
                                            str(args.records), "--record-size", str(RECORD)))
        http_read = costs(lambda: with_client_cpu(args.records, lambda: asyncio.run(
            http_consume(url, "bench-http", args.records))))
    row = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "label": args.label, "partitions": args.partitions,
           "concurrency": args.concurrency, "http_client": chosen[0], "warm_memory_gb": args.warm_memory,
           "kafka_produce": {k: kafka.get(k) for k in ("records_per_s", "mb_per_s", "broker_cpu_us_per_record")},
           "http_produce": http,
           "kafka_consume": {k: kafka_read.get(k) for k in ("records_per_s", "mb_per_s", "broker_cpu_us_per_record")},
           "http_consume": http_read}
    if len(chosen) > 1:
        row["http_produce_aiohttp"] = http_runs["aiohttp"]
        aiohttp_rate = http_runs["aiohttp"]["records_per_s"]
        row["http_over_kafka_produce_aiohttp"] = round(aiohttp_rate / kafka["records_per_s"], 2)
    row["http_over_kafka_produce"] = round(http["records_per_s"] / kafka["records_per_s"], 2)
    if args.floor:
        row["floor_produce"] = http_runs["floor"]
        row["floor_over_kafka_produce"] = round(http_runs["floor"]["records_per_s"] / kafka["records_per_s"], 2)
    measured = chosen + (["floor"] if args.floor else [])
    row["rounds"] = [{"kafka_records_per_s": round(k["records_per_s"]),
                      **{f"{name}_records_per_s": h[name]["records_per_s"] for name in measured},
                      **{f"{name}_broker_cpu_us_per_record": h[name]["broker_cpu_us_per_record"] for name in measured},
                      "kafka_broker_cpu_us_per_record": k["broker_cpu_us_per_record"],
                      "ratio": round(h[chosen[0]]["records_per_s"] / k["records_per_s"], 2),
                      **({"floor_ratio": round(h["floor"]["records_per_s"] / k["records_per_s"], 2)}
                         if args.floor else {})} for k, h in rounds]
    row["http_over_kafka_consume"] = round(http_read["records_per_s"] / kafka_read["records_per_s"], 2)
    RESULTS.parent.mkdir(exist_ok=True)
    with RESULTS.open("a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row, indent=2))
    if args.plot:
        plot(row)


def plot(row: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    names = ["produce", "consume"]
    kafka = [row["kafka_produce"]["records_per_s"], row["kafka_consume"]["records_per_s"]]
    http = [row["http_produce"]["records_per_s"], row["http_consume"]["records_per_s"]]
    ax.bar([0 - 0.2, 1 - 0.2], kafka, width=0.4, label="Kafka protocol (confluent-kafka)")
    ax.bar([0 + 0.2, 1 + 0.2], http, width=0.4, label="REST Proxy v2 (batches of 100)")
    if "floor_produce" in row:  # drawn over the REST Proxy's bar: the most it could reach here
        ax.bar([0 + 0.2], [row["floor_produce"]["records_per_s"]], width=0.4, fill=False, linestyle="--",
               label="floor: read, parse, encode, pwrite only (bench.http_floor)")
    ax.set_ylim(0, max(kafka + http) * 1.4)  # room for the legend above the bars
    ax.set_xticks([0, 1], names)
    ax.set_ylabel("1 KiB records/s")
    ax.set_title(f"One broker, acks=all, {row['partitions']} partitions ({row['time']})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)
    print(f"wrote {PLOT}")


if __name__ == "__main__":
    main()
