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

// The client-matrix scenario (tests/clients/test_client_matrix.py): {version, checks}.
async function matrix () {
  const checks = {}
  const { topic, group } = spec
  const names = await withAdmin(async admin => {
    await admin.createTopics({ topics: [{ topic, numPartitions: 1, replicationFactor: 1 }], waitForLeaders: true })
    return admin.listTopics()
  })
  checks.admin = names.includes(topic) ? 'ok' : `got ${names}`
  const producer = kafka.producer()
  await producer.connect()
  await producer.send({ topic, messages: [0, 1, 2, 3, 4].map(i => ({ value: `a${i}` })) })
  checks.produce = 'ok'
  const consume = async n => {
    const consumer = kafka.consumer({ groupId: group })
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    const got = []
    await new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, 30000)
      consumer.run({ autoCommit: false, eachMessage: async ({ partition, message }) => {
        got.push(message.value.toString())
        await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }])
        if (got.length === n) { clearTimeout(timer); resolve() }
      } }).catch(reject)
    })
    await consumer.disconnect()
    return got
  }
  let got = await consume(5)
  checks['group consume + commit'] = got.join() === 'a0,a1,a2,a3,a4' ? 'ok' : `got ${got}`
  await producer.send({ topic, messages: [{ value: 'b0' }, { value: 'b1' }] })
  await producer.disconnect()
  got = await consume(2)
  checks.resume = got.join() === 'b0,b1' ? 'ok' : `got ${got}`
  const offsets = await withAdmin(admin => admin.fetchOffsets({ groupId: group, topics: [topic] }))
  const committed = offsets[0].partitions[0].offset
  checks['committed offsets'] = committed === '7' ? 'ok' : `got ${committed}`
  const tx = kafka.producer({ transactionalId: `${group}-tx`, maxInFlightRequests: 1, idempotent: true })
  await tx.connect()
  let t = await tx.transaction()
  await t.send({ topic, messages: [{ value: 'c0' }] })
  await t.commit()
  t = await tx.transaction()
  await t.send({ topic, messages: [{ value: 'x0' }] })
  await t.abort()
  await tx.disconnect()
  const reader = kafka.consumer({ groupId: `${group}-rc`, readUncommitted: false })
  await reader.connect()
  await reader.subscribe({ topics: [topic], fromBeginning: true })
  const seen = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, 30000)
    reader.run({ eachMessage: async ({ message }) => {
      seen.push(message.value.toString())
      if (seen.includes('c0')) { clearTimeout(timer); setTimeout(resolve, 1000) }
    } }).catch(reject)
  })
  await reader.disconnect()
  checks.transactions = seen[seen.length - 1] === 'c0' && !seen.includes('x0') ? 'ok' : `read ${seen}`
  return { version: require('kafkajs/package.json').version, checks }
}

const ACTIONS = { alterConfigs, advertised, matrix }

ACTIONS[spec.action]()
  .then(result => { process.stdout.write(JSON.stringify(result) + '\n'); process.exit(0) })
  .catch(err => { process.stderr.write(String(err && err.stack || err) + '\n'); process.exit(1) })
