// @platformatic/kafka (a Kafka client written from the protocol in TypeScript, for Kafka 3.5 to 4.2) against
// a dm broker. Usage: node platformatic_client.mjs '<json>' where the JSON names the scenario, the brokers, the
// package's node_modules directory, the security settings and the scenario's inputs; prints one JSON object
// with what happened.
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { produceUntilStopped as loop } from './produce_until_stopped.mjs'

const spec = JSON.parse(process.argv[2])

// The package asks for Node.js 22, whose Promise.withResolvers it uses; Debian's Node.js 20 lacks only that.
if (!Promise.withResolvers) {
  Promise.withResolvers = function () {
    let resolve, reject
    const promise = new Promise((res, rej) => { resolve = res; reject = rej })
    return { promise, resolve, reject }
  }
}
// An ES module does not resolve packages through NODE_PATH: import the pinned one from where it is installed.
const kafka = await import(pathToFileURL(path.join(spec.modules, '@platformatic', 'kafka', 'dist', 'index.js')).href)
const { Admin, Producer, Consumer, ProduceAcks, stringSerializers, stringDeserializers } = kafka

function options (clientId) {
  const config = { clientId, bootstrapBrokers: spec.brokers, timeout: 10000, retries: 5 }
  if (spec.tls) {
    config.tls = { ca: fs.readFileSync(spec.tls.ca, 'utf-8') }
    if (spec.tls.cert) {
      config.tls.cert = fs.readFileSync(spec.tls.cert, 'utf-8')
      config.tls.key = fs.readFileSync(spec.tls.key, 'utf-8')
    }
  }
  if (spec.sasl) config.sasl = spec.sasl // { mechanism: 'PLAIN' | 'SCRAM-SHA-256' | 'SCRAM-SHA-512', username, password }
  return config
}

function producer (clientId, extra = {}) {
  return new Producer({ ...options(clientId), serializers: stringSerializers, idempotent: true, acks: ProduceAcks.ALL, ...extra })
}

// The API error codes of a failed call (the client wraps them in AggregateErrors).
function codes (error) {
  const found = []
  const walk = e => {
    if (!e) return
    if (typeof e.apiCode === 'number') found.push(e.apiCode)
    for (const inner of e.errors || []) walk(inner)
  }
  walk(error)
  return found
}

// Reads until `count` records arrived or `timeoutMs` passed; each as {partition, offset, key, value, headers}.
async function consume (groupId, topic, count, timeoutMs, groupProtocol = 'classic') {
  const consumer = new Consumer({ ...options('dm-tests-consumer'), groupId, deserializers: stringDeserializers, groupProtocol })
  const stream = await consumer.consume({ topics: [topic], mode: 'earliest', autocommit: false, isolationLevel: 1, maxWaitTime: 500 })
  const seen = []
  const timer = setTimeout(() => stream.close(), timeoutMs)
  try {
    for await (const m of stream) {
      const headers = {}
      for (const [k, v] of m.headers || []) headers[k.toString()] = v === undefined ? null : v.toString()
      seen.push({ partition: m.partition, offset: Number(m.offset), key: m.key ?? null, value: m.value ?? null, headers })
      if (seen.length >= count) break
    }
  } catch (e) {
    if (e.name !== 'AbortError') throw e // what leaving the loop early raises
  }
  clearTimeout(timer)
  if (seen.length) {
    // Commit where each partition stopped: one commit per partition's last record.
    const latest = new Map()
    for (const m of seen) latest.set(m.partition, m)
    await consumer.commit({ offsets: [...latest.values()].map(m => ({ topic, partition: m.partition, offset: BigInt(m.offset + 1), leaderEpoch: 0 })) })
  }
  await stream.close().catch(() => {})
  await consumer.close(true)
  return seen
}

async function roundTrip () {
  const p = producer('dm-tests-producer', { autocreateTopics: true }) // as the other clients' round trips
  await p.send({ messages: spec.values.map(value => ({ topic: spec.topic, value })) })
  await p.close()
  const seen = await consume(`pk-${spec.topic}`, spec.topic, spec.values.length, 30000)
  return { values: seen.map(m => m.value) }
}

// Two idempotent producers writing to one partition in turns: each must have a producer id of its own.
async function sharedPartition () {
  const admin = new Admin(options('dm-tests-admin'))
  await admin.createTopics({ topics: [spec.topic], partitions: 1, replicas: 1 })
  await admin.close()
  const producers = [producer('dm-tests-a'), producer('dm-tests-b')]
  const acknowledged = []
  for (let round = 0; round < spec.rounds; round++) {
    for (const [i, p] of producers.entries()) {
      const messages = Array.from({ length: spec.perRound }, (_, j) => ({ topic: spec.topic, partition: 0, value: `${i}-${round}-${j}` }))
      const answer = await p.send({ messages })
      acknowledged.push({ producer: i, round, offset: Number(answer.offsets[0].offset) })
    }
  }
  const ids = producers.map(p => [p.producerId.toString(), p.producerEpoch])
  for (const p of producers) await p.close()
  const seen = await consume(`pk-shared-${spec.topic}`, spec.topic, spec.rounds * spec.perRound * 2, 30000)
  return { ids, acknowledged, values: seen.map(m => m.value), offsets: seen.map(m => m.offset) }
}

async function features () {
  const topic = spec.topic
  const out = {}
  const admin = new Admin(options('dm-tests-admin'))
  out.created = (await admin.createTopics({ topics: [topic], partitions: 3, replicas: 1 })).map(t => t.name)
  out.createdAgain = await admin.createTopics({ topics: [topic], partitions: 3, replicas: 1 }).then(() => [], codes)
  await admin.createPartitions({ topics: [{ name: topic, count: 4 }] })
  await admin.incrementalAlterConfigs({ resources: [{ resourceType: 2, resourceName: topic, configs: [{ name: 'retention.ms', value: '3600000', configOperation: 0 }] }] })
  const [described] = await admin.describeConfigs({ resources: [{ resourceType: 2, resourceName: topic }] })
  out.configs = Object.fromEntries(described.configs.map(c => [c.name, c.value]))
  const metadata = await admin.metadata({ topics: [topic] })
  out.partitions = metadata.topics.get(topic).partitionsCount

  // An idempotent producer: keys, headers, and each codec this Node.js has (zstd needs Node.js 22).
  const p = producer('dm-tests-producer')
  const codecs = ['none', 'gzip', 'snappy', 'lz4']
  let sent = 0
  for (const compression of codecs) {
    const messages = Array.from({ length: spec.perCodec }, (_, j) => ({ topic, key: `k${sent + j}`, value: `v${sent + j}`, headers: { i: String(sent + j), codec: compression } }))
    await p.send({ messages, compression })
    sent += spec.perCodec
  }
  await p.close()
  out.sent = sent

  // Transactions: one committed, one aborted.
  const t = producer('dm-tests-txn', { transactionalId: `pk-txn-${topic}` })
  for (const [value, commit] of [['committed', true], ['aborted', false]]) {
    const txn = await t.beginTransaction()
    await txn.send({ messages: [{ topic, partition: 0, key: 'txn', value }] })
    if (commit) await txn.commit(); else await txn.abort()
  }
  await t.close()

  // Groups of both protocols read committed records and commit where they stopped.
  out.groups = {}
  for (const protocol of ['classic', 'consumer']) {
    const group = `pk-${protocol}-${topic}`
    const seen = await consume(group, topic, sent + 1, 30000, protocol)
    const [committed] = await admin.listConsumerGroupOffsets({ groups: [group] })
    const described = await admin.describeGroups({ groups: [group] }).then(groups => [...groups.values()].map(g => ({ state: g.state, protocolType: g.protocolType })), e => ({ errors: codes(e) }))
    out.groups[protocol] = {
      seen,
      committed: Object.fromEntries(committed.topics.flatMap(tp => tp.partitions.map(pp => [pp.partitionIndex, Number(pp.committedOffset)]))),
      described
    }
  }
  const [listed] = await admin.listOffsets({ topics: [{ name: topic, partitions: [0, 1, 2, 3].map(partitionIndex => ({ partitionIndex, timestamp: -1n })) }] })
  out.ends = Object.fromEntries(listed.partitions.map(pp => [pp.partitionIndex, Number(pp.offset)]))
  const [deleted] = await admin.deleteRecords({ topics: [{ name: topic, partitions: [{ partition: 1, offset: 1n }] }] })
  out.lowWatermark = Number(deleted.partitions[0].lowWatermark)
  await admin.deleteTopics({ topics: [topic] })
  out.listedAfterDelete = (await admin.listTopics()).includes(topic)
  await admin.close()
  return out
}

// tests/node/produce_until_stopped.mjs's loop, with an idempotent producer of this client.
async function produceUntilStopped () {
  const p = producer('dm-tests-chaos', { retries: 20, retryDelay: 100 })
  await loop(spec.stopFile, spec.partitions, async (partition, value) => {
    const answer = await p.send({ messages: [{ topic: spec.topic, partition, value }] })
    return Number(answer.offsets[0].offset)
  }, e => `${e.name}: ${e.message} ${JSON.stringify(codes(e))}`)
  await p.close()
  return { done: true }
}

const scenarios = { roundTrip, sharedPartition, features, produceUntilStopped }
scenarios[spec.scenario]()
  .then(result => { process.stdout.write(JSON.stringify(result)); process.exit(0) })
  .catch(e => { process.stderr.write(`${e.name}: ${e.message}\n${JSON.stringify(codes(e))}\n${e.stack}\n`); process.exit(1) })
