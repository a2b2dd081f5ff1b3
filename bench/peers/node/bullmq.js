'use strict';
// Peer 2: BullMQ job schedulers.
//
// One queue for all jobs. At start every node upserts one job scheduler per
// job (scheduler id = job name, cron pattern = SCHEDULE), which is idempotent
// and what the BullMQ docs recommend doing at application start, and runs a
// Worker; whichever worker picks up a scheduled job runs it. Each occurrence
// is one BullMQ job whose id is `repeat:<job>:<scheduled ms>`, so the queue,
// not the clocks of the nodes, decides which node runs it.
// Contract: ../README.md.

const { log, readEnv, occurrenceString, runProbe, ready, onShutdown } = require('./common');
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');

const cfg = readEnv();
const QUEUE = 'solocron-bench';
const CONCURRENCY = 50;
const verbose = process.env.PEER_VERBOSE === '1';

// Workers need maxRetriesPerRequest: null (BullMQ docs); Queue and Worker
// share this connection, the Worker makes its own blocking duplicate.
const connection = new IORedis(cfg.redisUrl, { maxRetriesPerRequest: null });
connection.on('error', (err) => log(`redis: ${err.message}`));

let queue;
let worker;

onShutdown(async () => {
  // worker.close() waits for the jobs in progress to finish (and be completed).
  if (worker) await worker.close();
  if (queue) await queue.close();
  if (connection.status === 'ready') await connection.quit();
  else connection.disconnect();
});

// The scheduled instant of a job-scheduler job. BullMQ 5 stores it in
// job.opts.prevMillis (the scheduler's nextMillis for this iteration); the job
// id `repeat:<scheduler>:<ms>` carries the same number. Not timestamp + delay:
// by the time a worker holds the job, `delay` reads 0 and `timestamp` is when
// the previous iteration created it (checked: it is about one period early).
function scheduledMillis(job) {
  if (Number.isFinite(job.opts && job.opts.prevMillis)) return job.opts.prevMillis;
  const m = /^repeat:.*:(\d+)$/.exec(job.id || '');
  if (m) return Number(m[1]);
  log(`warning: job ${job.id} carries no scheduled instant; using its processing time`);
  return Math.round(Date.now() / 1000) * 1000;
}

async function main() {
  queue = new Queue(QUEUE, {
    connection,
    // Auto-removal as the BullMQ docs advise for production: a fleet-wide
    // cron would otherwise keep every finished occurrence in Redis forever.
    defaultJobOptions: {
      removeOnComplete: { count: 1000 },
      removeOnFail: { count: 5000 },
    },
  });
  queue.on('error', (err) => log(`queue: ${err.message}`));
  await queue.waitUntilReady();

  for (const job of cfg.jobNames) {
    // tz UTC: the same cron semantics as solocron's default (`timezone = "UTC"`).
    await queue.upsertJobScheduler(job, { pattern: cfg.schedule, tz: 'UTC' }, { name: job, data: {} });
  }

  worker = new Worker(
    QUEUE,
    async (job) => {
      const occurrence = occurrenceString(scheduledMillis(job));
      if (verbose) {
        log(`${job.id}: prevMillis ${job.opts.prevMillis}, timestamp+delay ${job.timestamp + job.delay}, occurrence ${occurrence}`);
      }
      const code = await runProbe(cfg, job.name, occurrence);
      // The job counts as done whatever the probe's exit status (solocron
      // records a failed run, it does not retry it); a throw here would make
      // BullMQ mark it failed, which changes nothing for the schedule.
      return code;
    },
    // concurrency 50: 10 jobs per second on 3 nodes must not queue behind one another.
    // Everything else is BullMQ's default (lockDuration 30 s, stalledInterval 30 s,
    // maxStalledCount 1, drainDelay 5 s).
    { connection, concurrency: CONCURRENCY },
  );
  worker.on('error', (err) => log(`worker: ${err.message}`));
  worker.on('failed', (job, err) => log(`job ${job && job.id} failed: ${err.message}`));
  await worker.waitUntilReady();

  log(`bullmq: queue ${QUEUE}, ${cfg.jobNames.length} job schedulers on "${cfg.schedule}", concurrency ${CONCURRENCY}`);
  ready();
}

main().catch((err) => {
  log(`fatal: ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
