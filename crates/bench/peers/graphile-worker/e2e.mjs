// The peer's end to end, on the workload of `jobwire bench`'s "end to end"
// run: PRODUCERS producers each write a business row and one job per
// transaction (graphile_worker.add_job in the same transaction) while
// graphile-worker, with its batched settings, runs the jobs. Reports jobs/s
// from the first transaction to the last job run, and the database cost per
// job read as drain.mjs reads it. Run through scripts/bench-peer-graphile
// (MODES=e2e).
import { Logger, makeWorkerUtils, run } from "graphile-worker";
import pg from "pg";

import { counters, report } from "./cost.mjs";

const url = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const jobs = Number(process.env.JOBS ?? 10000);
const concurrency = Number(process.env.CONCURRENCY ?? 64);
const producers = Number(process.env.PRODUCERS ?? 8);
const payloadBytes = Number(process.env.PAYLOAD_BYTES ?? 100);
const quiet = new Logger(() => () => {});

const utils = await makeWorkerUtils({ connectionString: url, logger: quiet });
await utils.migrate();
const pool = new pg.Pool({ connectionString: url, max: producers + 1 });
await pool.query(
  "CREATE TABLE IF NOT EXISTS bench_orders_peer (id uuid PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now())",
);
// A task name of its own per run, so runs never see each other's jobs.
const task = `bench_noop_${process.pid}_${Date.now()}`;

let ran = 0;
let allRan;
const done = new Promise((resolve) => {
  allRan = resolve;
});
const runner = await run({
  connectionString: url,
  concurrency,
  noHandleSignals: true,
  pollInterval: 1000,
  logger: quiet,
  taskList: {
    [task]: async () => {
      ran++;
      if (ran === jobs) allRan();
    },
  },
  preset: {
    worker: {
      localQueue: { size: 500 },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
      maxPoolSize: concurrency + 1,
    },
  },
});

const produce = async (first, count) => {
  const client = await pool.connect();
  try {
    for (let i = first; i < first + count; i++) {
      await client.query("BEGIN");
      await client.query("INSERT INTO bench_orders_peer (id) VALUES (gen_random_uuid())");
      await client.query("SELECT graphile_worker.add_job($1, $2::json)", [
        task,
        JSON.stringify({ i, filler: "x".repeat(payloadBytes) }),
      ]);
      await client.query("COMMIT");
    }
  } finally {
    client.release();
  }
};

const before = await counters(pool);
const started = process.hrtime.bigint();
const perProducer = Math.ceil(jobs / producers);
const producing = [];
for (let p = 0; p < producers; p++) {
  const first = p * perProducer;
  const count = Math.max(0, Math.min(perProducer, jobs - first));
  producing.push(produce(first, count));
}
await Promise.all(producing);
await done;
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
const after = await counters(pool);
await runner.stop();
await utils.release();
await pool.end();
report({ mode: "e2e", producers, concurrency }, { jobs, ran, seconds, before, after });
