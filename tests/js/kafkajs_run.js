// Runs one kafkajs scenario against a broker and prints its result as JSON on stdout.
// Usage: node kafkajs_run.js '<json spec>'; spec = {brokers: ["host:port"], action, ...}.
// Used by tests/integration/test_kafkajs.py; exits 1 with the error on stderr on failure.
'use strict'
const { Kafka, ConfigResourceTypes, logLevel } = require('kafkajs')

const spec = JSON.parse(process.argv[2])
const kafka = new Kafka({ clientId: 'hightide-kafkajs-test', brokers: spec.brokers, logLevel: logLevel.NOTHING })

const TYPES = { topic: ConfigResourceTypes.TOPIC, broker: ConfigResourceTypes.BROKER }

async function withAdmin (fn) {
  const admin = kafka.admin()
  await admin.connect()
  try { return await fn(admin) } finally { await admin.disconnect() }
}

// alterConfigs, then describeConfigs of the same resources: [{error, configs}] per resource.
async function alterConfigs () {
  const resources = spec.resources.map(r => ({
    type: TYPES[r.type], name: r.name,
    configEntries: Object.entries(r.configs).map(([name, value]) => ({ name, value }))
  }))
  return withAdmin(async admin => {
    let error = null
    try {
      await admin.alterConfigs({ validateOnly: !!spec.validateOnly, resources })
    } catch (e) {
      error = { type: e.type || e.name, message: e.message }
    }
    const described = await admin.describeConfigs({
      includeSynonyms: false,
      resources: spec.resources.map(r => ({ type: TYPES[r.type], name: r.name, configNames: spec.describe }))
    })
    const configs = described.resources.map(r => Object.fromEntries(
      r.configEntries.map(c => [c.configName, { value: c.configValue, isDefault: c.isDefault }])))
    return { error, configs }
  })
}

// The brokers kafkajs is told about, then a produce and a group commit through them.
async function advertised () {
  const cluster = await withAdmin(admin => admin.describeCluster())
  const producer = kafka.producer()
  await producer.connect()
  const sent = await producer.send({ topic: spec.topic, messages: [{ value: 'via-name' }] })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: spec.group })
  await consumer.connect()
  await consumer.subscribe({ topics: [spec.topic], fromBeginning: true })
  const value = await new Promise((resolve, reject) => {
    consumer.run({ autoCommit: false, eachMessage: async ({ topic, partition, message }) => {
      await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }])
      resolve(message.value.toString())
    } }).catch(reject)
  })
  await consumer.disconnect()
  const offsets = await withAdmin(admin => admin.fetchOffsets({ groupId: spec.group, topics: [spec.topic] }))
  return { brokers: cluster.brokers.map(b => ({ host: b.host, port: b.port })), sent, value, offsets }
}

const ACTIONS = { alterConfigs, advertised }

ACTIONS[spec.action]()
  .then(result => { process.stdout.write(JSON.stringify(result) + '\n'); process.exit(0) })
  .catch(err => { process.stderr.write(String(err && err.stack || err) + '\n'); process.exit(1) })
