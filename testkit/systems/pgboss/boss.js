// pg-boss 10 for queuebot's preset tests, driven from Python (testkit/systems/pgboss_system.py).
//
//   node boss.js build '{"url": ..., "queues": {"emails": [3, 5]}}'
//       boss.start() makes the schema "pgboss"; each queue is created with retryLimit 1
//       and retryDelay 0 (a failing job runs twice, then its state is "failed"); ok jobs
//       then failing ones (data {"fail": true}) are sent. Prints {queue: {ok, failing}}.
//   node boss.js work '{"url": ..., "timeout": 60}'
//       pg-boss's own worker (boss.work) on every queue until no job of them is created,
//       retry or active; a job with data.fail throws while QB_SYSTEMS_FAULT=1.
//       Prints {"seconds": N}.
//   node boss.js charges '{"url": ..., "ok": 50, "failing": 450, "first": 100000}'
//       The payments outage (testkit/systems/outage.py): the queue "charges" (retryLimit 1,
//       retryDelay 0) gets ok then failing charges, each {"invoice": "INV-<first + n>",
//       "amount_cents", "customer", "fail"}, and the payments fake's table
//       payments.charges is made. Prints {"charges": {ok, failing}, "invoices": {id: inv}}.
//   node boss.js serve '{"url": ...}'
//       pg-boss's own worker on every queue, running until SIGTERM or SIGINT (then it stops
//       gracefully: the jobs it holds finish first). Prints {"ready": true} once it works.
//
// The charges' handler is a client of the payments fake: while QB_SYSTEMS_FAULT=1 the
// payments API answers a failing charge with "503 Service Unavailable (request id <random
// hex>)", which the handler throws; otherwise the API accepts the charge and records it
// (one row of payments.charges per charge accepted: a charge made twice shows as two rows).
//
// What wakes pg-boss 10's workers (read in node_modules/pg-boss/src, 10.4.2): nothing in
// the database. pg-boss 10 sends and listens to no NOTIFY at all (no LISTEN, NOTIFY or
// pg_notify anywhere in its source, and createQueue has no notify option); its workers
// poll, every pollingIntervalSeconds (2 s by default, 0.5 s at least). boss.notifyWorker(id)
// only cuts short the polling delay of a worker in the same process. So a job put back in
// state "retry" by another process is picked up at the worker's next poll.
'use strict'

const crypto = require('crypto')
const PgBoss = require('pg-boss')

const FAULT = process.env.QB_SYSTEMS_FAULT === '1'

function boss (url) {
  const b = new PgBoss({
    connectionString: url,
    schema: 'pgboss',
    supervise: false, // no maintenance: nothing archived or deleted under the tests
    schedule: false,
    max: 10
  })
  b.on('error', err => console.error('pg-boss error:', err.message))
  return b
}

async function build ({ url, queues }) {
  const b = boss(url)
  await b.start()
  const out = {}
  for (const [name, [ok, failing]] of Object.entries(queues)) {
    await b.createQueue(name, { retryLimit: 1, retryDelay: 0, retryBackoff: false })
    const ids = { ok: [], failing: [] }
    for (let n = 0; n < ok + failing; n++) {
      const kind = n < ok ? 'ok' : 'failing'
      ids[kind].push(await b.send(name, { fail: kind === 'failing', n }))
    }
    out[name] = ids
  }
  await b.stop({ graceful: true, wait: true })
  return out
}

async function runnable (b) {
  const db = b.getDb()
  const res = await db.executeSql(
    "SELECT count(*)::int AS n FROM pgboss.job j JOIN pgboss.queue q ON q.name = j.name WHERE j.state IN ('created', 'retry', 'active')"
  )
  return res.rows[0].n
}

async function charge (b, job) {
  if (job.data.fail && FAULT) {
    const err = new Error(`503 Service Unavailable (request id ${crypto.randomBytes(8).toString('hex')})`)
    err.name = 'PaymentsApiError'
    throw err
  }
  await b.getDb().executeSql(
    'INSERT INTO payments.charges (invoice, job_id, amount_cents) VALUES ($1, $2, $3)',
    [job.data.invoice, job.id, job.data.amount_cents]
  )
  return { charged: job.data.invoice }
}

function handlerFor (b, name) {
  return async ([job]) => {
    if (name === 'charges') return charge(b, job)
    if (job.data && job.data.fail && FAULT) {
      const err = new Error(`smtp relay did not answer in 30 s (job ${job.data.n})`)
      err.name = 'TimeoutError' // output: {"name": "TimeoutError", "message": ..., "stack": ...}
      throw err
    }
    return { sent: true }
  }
}

// Workers per queue: the charges are many, and each pg-boss worker runs one job per poll.
const WORKERS = { charges: 8 }

async function startWorkers (b, perQueue) {
  const names = (await b.getQueues()).map(q => q.name).filter(n => !n.startsWith('__pgboss'))
  const workers = []
  for (const name of names) {
    for (let i = 0; i < (WORKERS[name] || perQueue); i++) {
      workers.push(
        await b.work(name, { batchSize: 1, pollingIntervalSeconds: 0.5 }, handlerFor(b, name))
      )
    }
  }
  return workers
}

async function charges ({ url, ok, failing, first = 100000 }) {
  const b = boss(url)
  await b.start()
  await b.getDb().executeSql(
    'CREATE SCHEMA IF NOT EXISTS payments; CREATE TABLE IF NOT EXISTS payments.charges (' +
      'id bigserial PRIMARY KEY, invoice text NOT NULL, job_id uuid NOT NULL, ' +
      'amount_cents integer NOT NULL, accepted_at timestamptz NOT NULL DEFAULT now())'
  )
  await b.createQueue('charges', { retryLimit: 1, retryDelay: 0, retryBackoff: false })
  const ids = { ok: [], failing: [] }
  const invoices = {}
  for (let n = 0; n < ok + failing; n++) {
    const kind = n < ok ? 'ok' : 'failing'
    const invoice = `INV-${first + n}`
    const data = {
      invoice,
      amount_cents: 1000 + (n % 97) * 25,
      customer: `cus_${(n * 7919) % 100003}`,
      fail: kind === 'failing'
    }
    const id = await b.send('charges', data)
    ids[kind].push(id)
    invoices[id] = invoice
  }
  await b.stop({ graceful: true, wait: true })
  return { charges: ids, invoices }
}

async function serve ({ url }) {
  const b = boss(url)
  await b.start()
  const workers = await startWorkers(b, 2)
  // A pg-boss worker waits out the rest of its polling interval (0.5 s at least) even
  // after it ran a job: waking the workers every 0.1 s keeps a large queue moving.
  const waking = setInterval(() => workers.forEach(id => b.notifyWorker(id)), 100)
  process.stdout.write(JSON.stringify({ ready: true }) + '\n')
  await new Promise(resolve => {
    process.once('SIGTERM', resolve)
    process.once('SIGINT', resolve)
  })
  clearInterval(waking)
  await b.stop({ graceful: true, wait: true, timeout: 10000 })
  return { stopped: true }
}

async function work ({ url, timeout = 60 }) {
  const started = Date.now()
  const b = boss(url)
  await b.start()
  const workers = await startWorkers(b, 2)
  // pg-boss's worker completes or fails a job without awaiting the write: count until
  // nothing is runnable twice in a row, waking the workers between looks.
  let idle = 0
  while (idle < 2) {
    if ((Date.now() - started) / 1000 > timeout) {
      throw new Error(`jobs still runnable after ${timeout} s`)
    }
    for (const id of workers) b.notifyWorker(id)
    await new Promise(resolve => setTimeout(resolve, 100))
    idle = (await runnable(b)) === 0 ? idle + 1 : 0
  }
  await b.stop({ graceful: true, wait: true, timeout: 5000 })
  return { seconds: (Date.now() - started) / 1000 }
}

async function main () {
  const [command, arg] = process.argv.slice(2)
  const commands = { build, work, charges, serve }
  if (!commands[command] || !arg) {
    console.error('usage: node boss.js build|work|charges|serve JSON')
    process.exit(2)
  }
  const out = await commands[command](JSON.parse(arg))
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().catch(err => {
  console.error(err && err.stack ? err.stack : err)
  process.exit(1)
})
