// graphile-worker 0.17 for queuebot's preset tests, driven from Python
// (testkit/systems/graphile_system.py).
//
//   node worker.js build '{"url": ..., "queues": {"emails": [3, 5]}}'
//       runMigrations() makes the schema "graphile_worker"; per queue, ok jobs then failing
//       ones (payload {"fail": true}) are added with its own client (addJob, task
//       "send_email", queueName set, maxAttempts 2). Prints {queue: {ok, failing}}.
//   node worker.js work '{"url": ..., "timeout": 60}'
//       its own worker (runOnce with a task list) until no job can run again (none with
//       attempts < max_attempts), waiting out its retry delay (exp(attempts) seconds) in
//       between; the task throws for payload.fail while QB_SYSTEMS_FAULT=1.
//       Prints {"seconds": N, "runs": N}.
//
// How graphile-worker 0.17 settles a job (read in node_modules/graphile-worker, 0.17.3):
// a success DELETEs the row from graphile_worker._private_jobs (dist/sql/completeJobs.js);
// a failure sets last_error to the error's message, run_at = greatest(now(), run_at) +
// exp(least(attempts, 10)) seconds and clears locked_by/locked_at (dist/sql/failJobs.js);
// attempts was raised when the job was taken. There is no status column: a job with
// attempts >= max_attempts is never taken again.
'use strict'

const { Logger, runMigrations, runOnce, makeWorkerUtils } = require('graphile-worker')
const { Client } = require('pg')

const FAULT = process.env.QB_SYSTEMS_FAULT === '1'
const TASK = 'send_email'

// Quiet: its logger writes to stdout, which carries this script's JSON. Errors go to
// stderr, one line each (a failing task's stack is not needed).
const logFactory = () => (level, message) => {
  if (level === 'error') console.error(`graphile-worker: ${String(message).split('\n')[0]}`)
}
const logger = new Logger(logFactory)

async function build ({ url, queues }) {
  await runMigrations({ connectionString: url, logger })
  const utils = await makeWorkerUtils({ connectionString: url, logger })
  const out = {}
  try {
    for (const [name, [ok, failing]] of Object.entries(queues)) {
      const ids = { ok: [], failing: [] }
      for (let n = 0; n < ok + failing; n++) {
        const kind = n < ok ? 'ok' : 'failing'
        const job = await utils.addJob(
          TASK,
          { fail: kind === 'failing', n },
          { queueName: name, maxAttempts: 2 }
        )
        ids[kind].push(String(job.id))
      }
      out[name] = ids
    }
  } finally {
    await utils.release()
  }
  return out
}

const taskList = {
  [TASK]: async (payload) => {
    if (payload && payload.fail && FAULT) {
      const err = new Error(`TimeoutError: smtp relay did not answer in 30 s (job ${payload.n})`)
      throw err
    }
  }
}

// Jobs that can still run: attempts left. Seconds until the first of them is due.
const PENDING = `
select count(*)::int as n,
       coalesce(extract(epoch from min(run_at) - now()), 0)::float as wait
from graphile_worker._private_jobs
where attempts < max_attempts`

async function work ({ url, timeout = 60 }) {
  const started = Date.now()
  const client = new Client({ connectionString: url })
  await client.connect()
  let runs = 0
  try {
    for (;;) {
      await runOnce({ connectionString: url, concurrency: 4, logger, noHandleSignals: true }, taskList)
      runs++
      const { rows: [{ n, wait }] } = await client.query(PENDING)
      if (n === 0) break
      const elapsed = (Date.now() - started) / 1000
      if (elapsed > timeout) throw new Error(`jobs still runnable after ${timeout} s`)
      // its retry delay: exp(attempts) s after a failure; sleep until the first is due
      const ms = Math.min(Math.max(wait, 0) * 1000 + 50, (timeout - elapsed) * 1000 + 50)
      await new Promise(resolve => setTimeout(resolve, ms))
    }
  } finally {
    await client.end()
  }
  return { seconds: (Date.now() - started) / 1000, runs }
}

async function main () {
  const [command, arg] = process.argv.slice(2)
  const commands = { build, work }
  if (!commands[command] || !arg) {
    console.error('usage: node worker.js build|work JSON')
    process.exit(2)
  }
  const out = await commands[command](JSON.parse(arg))
  process.stdout.write(JSON.stringify(out) + '\n')
}

main().catch(err => {
  console.error(err && err.stack ? err.stack : err)
  process.exit(1)
})
