// A peer measured, not quoted: graphile-worker drains JOBS pre-enqueued no-op
// jobs on the same PostgreSQL that `jobwire bench` uses, and reports jobs/s
// and the database cost per job read the same way (transaction ids and WAL
// position before and after). Run through scripts/bench-peer-graphile.
//
//   MODE=default  graphile-worker's defaults (one fetch and one completion
//                 statement per job)
//   MODE=batched  the settings its performance page uses: a local queue of
//                 500 fetched in one statement, batched completions
import { Logger, makeWorkerUtils, run } from "graphile-worker";
import pg from "pg";

import { counters, report } from "./cost.mjs";

const url = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const jobs = Number(process.env.JOBS ?? 10000);
const concurrency = Number(process.env.CONCURRENCY ?? 24);
const mode = process.env.MODE ?? "batched";
const payloadBytes = Number(process.env.PAYLOAD_BYTES ?? 100);
const quiet = new Logger(() => () => {});

const pool = new pg.Pool({ connectionString: url, max: 2 });
const utils = await makeWorkerUtils({ connectionString: url, logger: quiet });
await utils.migrate();
// A task name of its own per run, so runs never see each other's jobs.
const task = `bench_noop_${process.pid}_${Date.now()}`;
for (let start = 0; start < jobs; start += 1000) {
  const specs = [];
  for (let i = start; i < Math.min(start + 1000, jobs); i++) {
    specs.push({ identifier: task, payload: { i, filler: "x".repeat(payloadBytes) } });
  }
  await utils.addJobs(specs);
}

const left = async () => {
  const { rows } = await pool.query(
    "SELECT count(*)::int AS n FROM graphile_worker.jobs WHERE task_identifier = $1",
    [task],
  );
  return rows[0].n;
};

let ran = 0;
const before = await counters(pool);
const started = process.hrtime.bigint();
const runner = await run({
  connectionString: url,
  concurrency,
  noHandleSignals: true,
  pollInterval: 1000,
  logger: quiet,
  taskList: {
    [task]: async () => {
      ran++;
    },
  },
  preset:
    mode === "batched"
      ? {
          worker: {
            localQueue: { size: 500 },
            completeJobBatchDelay: 0,
            failJobBatchDelay: 0,
            maxPoolSize: concurrency + 1,
          },
        }
      : { worker: { maxPoolSize: concurrency + 1 } },
});
// Wait in process until every job has run (free for the database), then
// for the last completions to commit. Counting the table every 20 ms from
// the start read every waiting job each time: on a 200,000-job drain the
// check itself took the cores the drain was measured on (jobwire's bench had
// the same fault; docs/benchmarks.md, "The bench's own progress check").
while (ran < jobs) {
  await new Promise((resolve) => setTimeout(resolve, 20));
}
while ((await left()) > 0) {
  await new Promise((resolve) => setTimeout(resolve, 20));
}
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
await runner.stop();
const after = await counters(pool);
await utils.release();
await pool.end();
report({ mode, concurrency }, { jobs, ran, seconds, before, after });
