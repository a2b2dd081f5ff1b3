'use strict';
// Contract plumbing shared by the peers (see ../README.md, "The contract"):
// environment, the probe spawn, the occurrence format, `ready`, shutdown.
// The scheduling/locking pattern itself lives in each runner file.

const { spawn } = require('node:child_process');
const path = require('node:path');

// stdout carries exactly one line, `ready`; everything else goes to stderr.
// Libraries that log with console.log/info/debug (node-cron's default logger
// does) must not write to stdout.
console.log = console.error;
console.info = console.error;
console.debug = console.error;

function log(...args) {
  console.error(`[${process.env.NODE_ID || '?'}]`, ...args);
}

function die(msg) {
  log(`error: ${msg}`);
  process.exit(2);
}

function readEnv() {
  const env = process.env;
  const redisUrl = env.REDIS_URL;
  const nodeId = env.NODE_ID;
  const jobs = Number(env.JOBS);
  const schedule = env.SCHEDULE;
  const probe = env.PROBE;
  const lockTtlMs = env.LOCK_TTL_MS === undefined || env.LOCK_TTL_MS === '' ? 10000 : Number(env.LOCK_TTL_MS);
  if (!redisUrl) die('REDIS_URL is not set');
  if (!nodeId) die('NODE_ID is not set');
  if (!Number.isInteger(jobs) || jobs < 1) die(`JOBS must be a positive integer, got ${JSON.stringify(env.JOBS)}`);
  if (!schedule || schedule.trim().split(/\s+/).length !== 6) die(`SCHEDULE must be a 6-field cron (with seconds), got ${JSON.stringify(schedule)}`);
  if (!probe || !path.isAbsolute(probe)) die(`PROBE must be an absolute path, got ${JSON.stringify(probe)}`);
  if (!Number.isInteger(lockTtlMs) || lockTtlMs < 1) die(`LOCK_TTL_MS must be a positive integer, got ${JSON.stringify(env.LOCK_TTL_MS)}`);
  const jobNames = Array.from({ length: jobs }, (_, i) => `j${i}`);
  return { redisUrl, nodeId, jobNames, schedule: schedule.trim(), probe, lockTtlMs };
}

// RFC 3339 UTC, whole seconds, `Z`: 2026-11-30T21:00:00Z.
// The libraries hand us whole-second instants; anything else is rounded to the
// nearest second and reported, since it would mean the instant is not a cron slot.
function occurrenceString(ms) {
  const rounded = Math.round(ms / 1000) * 1000;
  if (rounded !== ms) log(`warning: scheduled instant ${ms} is not a whole second; rounded to ${rounded}`);
  return new Date(rounded).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

const children = new Set();

// Run the job: spawn PROBE with no arguments and no shell; resolves when the
// child exits. The probe's stdout and stderr go to our stderr so that our
// stdout stays `ready` only.
function runProbe(cfg, job, occurrence) {
  return new Promise((resolve) => {
    let child;
    try {
      child = spawn(cfg.probe, [], {
        env: { ...process.env, SOLOCRON_JOB: job, SOLOCRON_OCCURRENCE: occurrence, SOLOCRON_NODE: cfg.nodeId },
        stdio: ['ignore', 2, 2],
      });
    } catch (err) {
      log(`${job} ${occurrence}: spawn failed: ${err.message}`);
      resolve(null);
      return;
    }
    children.add(child);
    child.once('error', (err) => {
      children.delete(child);
      log(`${job} ${occurrence}: spawn failed: ${err.message}`);
      resolve(null);
    });
    child.once('exit', (code, signal) => {
      children.delete(child);
      if (code !== 0) log(`${job} ${occurrence}: probe exited ${code === null ? `by ${signal}` : code}`);
      resolve(code);
    });
  });
}

function ready() {
  process.stdout.write('ready\n');
}

// SIGTERM/SIGINT: run `close` (stop scheduling, let in-flight jobs finish,
// close connections), then exit 0. Whatever is still pending after
// `graceMs` is abandoned: children are killed and we exit 0 anyway.
function onShutdown(close, graceMs = 3000) {
  let stopping = false;
  const handler = (sig) => {
    if (stopping) return;
    stopping = true;
    log(`${sig}: shutting down`);
    const timer = setTimeout(() => {
      log(`shutdown still pending after ${graceMs} ms; exiting anyway`);
      for (const c of children) c.kill('SIGKILL');
      process.exit(0);
    }, graceMs);
    timer.unref();
    Promise.resolve()
      .then(close)
      .catch((err) => log(`error while closing: ${err && err.message}`))
      .finally(() => process.exit(0));
  };
  process.on('SIGTERM', handler);
  process.on('SIGINT', handler);
}

module.exports = { log, die, readEnv, occurrenceString, runProbe, ready, onShutdown };
