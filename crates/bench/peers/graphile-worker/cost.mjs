// What drain.mjs and e2e.mjs both read and print: the database's
// transaction id and WAL position before and after a run, read the way
// `jobwire bench` reads them, and the run's one JSON line.

// The current transaction id (this reading takes one itself) and WAL
// position.
export const counters = async (pool) => {
  const { rows } = await pool.query(
    "SELECT pg_current_xact_id()::text::bigint AS xid, (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint AS wal",
  );
  return { xid: Number(rows[0].xid), wal: Number(rows[0].wal) };
};

// Print the run's line: `fields`, then jobs/s and the cost per job between
// the two readings. Exits non-zero if the tasks run were not the jobs.
export const report = (fields, { jobs, ran, seconds, before, after }) => {
  console.log(
    JSON.stringify({
      peer: "graphile-worker 0.18.0",
      ...fields,
      jobs,
      ran,
      seconds: Number(seconds.toFixed(3)),
      jobs_per_second: Math.round(jobs / seconds),
      // minus the one transaction id the second reading takes itself
      commits_per_job: Number(((after.xid - before.xid - 1) / jobs).toFixed(4)),
      wal_bytes_per_job: Math.round((after.wal - before.wal) / jobs),
    }),
  );
  if (ran !== jobs) {
    console.error(`graphile-worker ran ${ran} tasks for ${jobs} jobs`);
    process.exit(1);
  }
};
