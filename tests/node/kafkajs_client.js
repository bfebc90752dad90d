// KafkaJS (a Kafka client written from the protocol in JavaScript, not on librdkafka or the Java client)
// against a dm broker. Usage: node kafkajs_client.js '<json>' where the JSON names the scenario, the
// brokers, the security settings and the scenario's inputs; prints one JSON object with what happened.
'use strict'
const fs = require('fs')
const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

const spec = JSON.parse(process.argv[2])

function client () {
  const config = { clientId: 'dm-tests', brokers: spec.brokers, logLevel: logLevel.NOTHING,
    retry: { retries: 3 }, connectionTimeout: 5000, authenticationTimeout: 5000 }
  if (spec.ssl) {
    config.ssl = { ca: [fs.readFileSync(spec.ssl.ca, 'utf-8')] }
    if (spec.ssl.cert) {
      config.ssl.cert = fs.readFileSync(spec.ssl.cert, 'utf-8')
      config.ssl.key = fs.readFileSync(spec.ssl.key, 'utf-8')
    }
  }
  if (spec.sasl) config.sasl = spec.sasl // { mechanism: 'plain' | 'scram-sha-256' | 'scram-sha-512', username, password }
  return new Kafka(config)
}

// Reads until `count` messages arrived or `timeoutMs` passed; each as {partition, offset, key, value, headers}.
async function consume (kafka, topic, groupId, count, timeoutMs, readUncommitted = false) {
  const consumer = kafka.consumer({ groupId, readUncommitted })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const seen = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, timeoutMs)
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        const headers = {}
        for (const [k, v] of Object.entries(message.headers || {})) headers[k] = v === null ? null : v.toString()
        seen.push({ partition, offset: Number(message.offset), key: message.key === null ? null : message.key.toString(),
          value: message.value === null ? null : message.value.toString(), headers })
        if (seen.length >= count) { clearTimeout(timer); resolve() }
      }
    }).catch(reject)
  })
  await consumer.disconnect() // commits what was consumed
  return seen
}

async function roundTrip () {
  const kafka = client()
  const producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic: spec.topic, acks: -1, messages: spec.values.map(value => ({ value })) })
  await producer.disconnect()
  const seen = await consume(kafka, spec.topic, `kjs-${spec.topic}`, spec.values.length, 30000)
  return { values: seen.map(m => m.value) }
}

async function features () {
  const kafka = client()
  const topic = spec.topic
  const out = {}
  const admin = kafka.admin()
  await admin.connect()
  out.created = await admin.createTopics({ topics: [{ topic, numPartitions: 3, replicationFactor: 1 }], waitForLeaders: true })
  out.createdAgain = await admin.createTopics({ topics: [{ topic, numPartitions: 3, replicationFactor: 1 }] })
  // An idempotent producer: plain batches, then gzip; keyed, keyless and with headers.
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const messages = []
  for (let i = 0; i < spec.count; i++) {
    messages.push({ key: i % 2 ? `k${i}` : null, value: `v${i}`, headers: { i: String(i) } })
  }
  const half = Math.floor(spec.count / 2)
  const sent = [
    ...await producer.send({ topic, acks: -1, messages: messages.slice(0, half) }),
    ...await producer.send({ topic, acks: -1, messages: messages.slice(half), compression: CompressionTypes.GZIP })
  ]
  out.sentErrors = sent.filter(r => r.errorCode !== 0).length
  await producer.disconnect()
  // A transactional producer: one transaction committed, one aborted, on one partition.
  const transactional = kafka.producer({ transactionalId: `kjs-tx-${topic}`, idempotent: true, maxInFlightRequests: 1 })
  await transactional.connect()
  const committed = await transactional.transaction()
  await committed.send({ topic, messages: [{ key: 'tx', value: 'committed', partition: 0 }] })
  await committed.commit()
  const aborted = await transactional.transaction()
  await aborted.send({ topic, messages: [{ key: 'tx', value: 'aborted', partition: 0 }] })
  await aborted.abort()
  await transactional.disconnect()
  // A consumer group reading committed records only.
  const groupId = `kjs-group-${topic}`
  const seen = await consume(kafka, topic, groupId, spec.count + 1, 30000)
  await new Promise(resolve => setTimeout(resolve, 500))
  out.consumed = seen
  out.offsets = await admin.fetchOffsets({ groupId, topics: [topic] })
  out.groups = (await admin.describeGroups([groupId])).groups
  out.topicOffsets = await admin.fetchTopicOffsets(topic)
  const configs = await admin.describeConfigs({ resources: [{ type: 2, name: topic }], includeSynonyms: false })
  out.configs = Object.fromEntries(configs.resources[0].configEntries.map(e => [e.configName, e.configValue]))
  await admin.createPartitions({ topicPartitions: [{ topic, count: 4 }] })
  out.partitionsAfterIncrease = (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0].partitions.length
  await admin.deleteTopics({ topics: [topic] })
  out.listedAfterDelete = (await admin.listTopics()).includes(topic)
  await admin.disconnect()
  return out
}

async function refused () {
  const admin = client().admin({ retry: { retries: 0 } })
  try {
    await admin.connect()
    await admin.listTopics()
  } catch (e) {
    return { error: `${e.name}: ${e.message}` }
  } finally {
    await admin.disconnect().catch(() => {})
  }
  return { error: null }
}

// tests/node/produce_until_stopped.mjs's loop, with KafkaJS's idempotent producer.
async function produceUntilStopped () {
  const { produceUntilStopped: loop } = await import('./produce_until_stopped.mjs')
  const producer = client().producer({ idempotent: true, maxInFlightRequests: 1,
    retry: { retries: 30, initialRetryTime: 100, maxRetryTime: 1000 } })
  await producer.connect()
  await loop(spec.stopFile, spec.partitions, async (partition, value) => {
    const [answer] = await producer.send({ topic: spec.topic, acks: -1, timeout: 10000, messages: [{ value, partition }] })
    return Number(answer.baseOffset)
  })
  await producer.disconnect()
  return { done: true }
}

const scenarios = { roundTrip, features, refused, produceUntilStopped }
scenarios[spec.scenario]()
  .then(result => { process.stdout.write(JSON.stringify(result)); process.exit(0) })
  .catch(e => { process.stderr.write(`${e.name}: ${e.message}\n${e.stack}\n`); process.exit(1) })
