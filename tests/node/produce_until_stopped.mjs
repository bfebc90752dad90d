// The loop of the JavaScript clients' produceUntilStopped scenario (tests/chaos/test_node_client_failover.py):
// one record at a time to explicit partitions in turn, each `p<partition>-<seq>`, until `stopFile` exists.
// Printed at once as JSON lines: {sending: value} before each send, {partition, offset, value} for each
// acknowledgement, {error, value} for each failure, so the caller knows what was acknowledged even if the
// process dies. `send(partition, value)` returns the record's offset; `describe(error)` words a failure.
import fs from 'node:fs'

export async function produceUntilStopped (stopFile, partitions, send, describe = e => `${e.name}: ${e.message}`) {
  const line = object => process.stdout.write(JSON.stringify(object) + '\n')
  for (let seq = 0; !fs.existsSync(stopFile); seq++) {
    const partition = seq % partitions
    const value = `p${partition}-${seq}`
    line({ sending: value })
    try {
      line({ partition, offset: await send(partition, value), value })
    } catch (e) {
      line({ error: describe(e), value })
    }
  }
}
