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
//
// What wakes pg-boss 10's workers (read in node_modules/pg-boss/src, 10.4.2): nothing in
// the database. pg-boss 10 sends and listens to no NOTIFY at all (no LISTEN, NOTIFY or
// pg_notify anywhere in its source, and createQueue has no notify option); its workers
// poll, every pollingIntervalSeconds (2 s by default, 0.5 s at least). boss.notifyWorker(id)
// only cuts short the polling delay of a worker in the same process. So a job put back in
// state "retry" by another process is picked up at the worker's next poll.
'use strict'

const PgBoss = require('pg-boss')

const FAULT = process.env.QB_SYSTEMS_FAULT === '1'

function boss (url) {
  const b = new PgBoss({
    connectionString: url,
    schema: 'pgboss',
    supervise: false, // no maintenance: nothing archived or deleted under the tests
    schedule: false,
    max: 4
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

async function work ({ url, timeout = 60 }) {
  const started = Date.now()
  const b = boss(url)
  await b.start()
  const names = (await b.getQueues()).map(q => q.name).filter(n => !n.startsWith('__pgboss'))
  const handler = async ([job]) => {
    if (job.data && job.data.fail && FAULT) {
      const err = new Error(`smtp relay did not answer in 30 s (job ${job.data.n})`)
      err.name = 'TimeoutError' // output: {"name": "TimeoutError", "message": ..., "stack": ...}
      throw err
    }
    return { sent: true }
  }
  const workers = []
  for (const name of names) {
    for (let i = 0; i < 2; i++) {
      workers.push(await b.work(name, { batchSize: 1, pollingIntervalSeconds: 0.5 }, handler))
    }
  }
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
  const commands = { build, work }
  if (!commands[command] || !arg) {
    console.error('usage: node boss.js build|work JSON')
    process.exit(2)
  }
  const out = await commands[command](JSON.parse(arg))
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().catch(err => {
  console.error(err && err.stack ? err.stack : err)
  process.exit(1)
})
