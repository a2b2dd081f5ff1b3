'use strict';
// Peer 1: the common "node-cron + Redlock" pattern.
//
// Every node schedules every job with node-cron; on each tick each node tries
// to take a per-JOB Redlock lock (`cron-lock:<job>`, the same key for every
// occurrence) with retryCount 0, runs the job if it got the lock, then
// releases it. A node that does not get the lock skips the tick.
//
// This is the pattern as blog posts and answers write it; its weak spots
// (a per-job rather than per-occurrence key, release right after a short
// job, timers driven by each node's own wall clock) are deliberately kept.
// Contract: ../README.md.

const { log, readEnv, occurrenceString, runProbe, ready, onShutdown } = require('./common');
const cron = require('node-cron');
const Redis = require('ioredis');
const { default: Redlock, ResourceLockedError, ExecutionError } = require('redlock');

const cfg = readEnv();
const verbose = process.env.PEER_VERBOSE === '1';

// node-cron's default logger writes info/debug to stdout; keep stdout for `ready`.
cron.setLogger({
  info: (m) => log(`node-cron: ${m}`),
  warn: (m) => log(`node-cron: ${m}`),
  error: (m, e) => log(`node-cron: ${m}`, e || ''),
  debug: () => {},
});

const redis = new Redis(cfg.redisUrl);
redis.on('error', (err) => log(`redis: ${err.message}`));

// Settings as in the redlock README, except retryCount: 0, the usual choice
// for "only one node should run it": a node that loses the race gives up at
// once instead of retrying (and then running the job late, a second time).
const redlock = new Redlock([redis], {
  driftFactor: 0.01, // README default
  retryCount: 0, // do not retry: losing the race means another node runs it
  retryDelay: 200, // README default (unused with retryCount 0)
  retryJitter: 200, // README default (unused with retryCount 0)
  automaticExtensionThreshold: 500, // README default (only used by redlock.using)
});
// Redlock emits every failed attempt; a held lock is the expected outcome.
redlock.on('error', (err) => {
  if (err instanceof ResourceLockedError) return;
  log(`redlock: ${err.message}`);
});

const inFlight = new Set();
const tasks = [];

onShutdown(async () => {
  await Promise.all(tasks.map((t) => t.stop()));
  await Promise.allSettled([...inFlight]);
  if (redis.status === 'ready') await redis.quit();
  else redis.disconnect(); // not connected: quit() would wait for a reconnect
});

function scheduleJob(job) {
  const lockKey = `cron-lock:${job}`;
  return cron.schedule(
    cfg.schedule,
    async (ctx) => {
      // ctx.date is the tick's scheduled instant as node-cron computed it
      // (a whole second), not the time the callback happens to run.
      const occurrence = occurrenceString(ctx.date.getTime());
      let lock;
      try {
        lock = await redlock.acquire([lockKey], cfg.lockTtlMs);
      } catch (err) {
        if (!(err instanceof ExecutionError)) log(`${job} ${occurrence}: acquire failed: ${err.message}`);
        else if (verbose) log(`${job} ${occurrence}: locked elsewhere, skipping`);
        return;
      }
      const run = runProbe(cfg, job, occurrence);
      inFlight.add(run);
      try {
        await run;
      } finally {
        inFlight.delete(run);
        try {
          await lock.release();
        } catch (err) {
          log(`${job} ${occurrence}: release failed: ${err.message}`);
        }
      }
    },
    // timezone UTC: the same cron semantics as solocron's default (`timezone = "UTC"`).
    { name: job, timezone: 'UTC' },
  );
}

async function main() {
  await redis.ping(); // connected
  for (const job of cfg.jobNames) tasks.push(scheduleJob(job));
  log(`node-cron + redlock: ${tasks.length} jobs on "${cfg.schedule}", lock ttl ${cfg.lockTtlMs} ms`);
  ready();
}

main().catch((err) => {
  log(`fatal: ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
