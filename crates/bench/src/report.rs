//! The results as a text table and as an SVG chart.

use std::fmt::Write as _;

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::{Environment, PathReport};

/// One line naming the machine and the database settings.
fn header(environment: &Environment) -> String {
    let kafka_trim = match environment.kafka_trim_ms {
        None => String::new(),
        Some(0) => ", kafka topics not trimmed".to_owned(),
        Some(ms) => format!(", kafka topics trimmed to the group's offsets every {ms} ms"),
    };
    format!(
        "{} cores ({}), PostgreSQL {}, synchronous_commit={}, fsync={}, wal_sync_method={}, autovacuum={}, one durable commit {:.2} ms, {} build, metrics {}, relay {} rows a pass × {} task(s){}",
        environment.cores,
        environment.cpu,
        environment.postgres,
        environment.synchronous_commit,
        environment.fsync,
        environment.wal_sync_method,
        environment.autovacuum,
        environment.durable_commit_ms,
        environment.build,
        if environment.metrics { "on" } else { "off" },
        environment.relay_batch_size,
        environment.relay_concurrency,
        kafka_trim,
    )
}

/// The report as a text table.
pub fn table(environment: &Environment, reports: &[PathReport]) -> String {
    let mut out = format!("jobwire bench: {}\n\n", header(environment));
    let _ = writeln!(
        out,
        "{:<10} {:>7} {:>9} {:>9} {:>11} {:>12} {:>10} {:>9} {:>5}",
        "path",
        "jobs",
        "drain/s",
        "e2e/s",
        "e2e batch/s",
        "commits/job",
        "WAL B/job",
        "rows/job",
        "bad"
    );
    for report in reports {
        let _ = writeln!(
            out,
            "{:<10} {:>7} {:>9.0} {:>9.0} {:>11.0} {:>12.3} {:>10.0} {:>9.1} {:>5}",
            report.path,
            report.drain.jobs,
            report.drain.jobs_per_second,
            report.end_to_end.jobs_per_second,
            report.end_to_end_batched.jobs_per_second,
            report.drain.cost.commits_per_job,
            report.drain.cost.wal_bytes_per_job,
            report.drain.cost.rows_written_per_job,
            report.lost_or_repeated(),
        );
    }
    out.push_str(
        "\ncommits, WAL and rows per job are for the drain run; e2e/s is the median single-job run; bad = jobs lost or run more than once, over every run (must be 0)\n\n",
    );
    single_job_runs(&mut out, reports);
    let _ = writeln!(
        out,
        "{:<10} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} | {:>6} {:>8} {:>8} {:>7} {:>9}",
        "latency",
        "jobs",
        "start p50",
        "start p95",
        "start p99",
        "start max",
        "end p50",
        "end p99",
        "urgent",
        "urg p95",
        "urg p99",
        "bulk",
        "bulk left"
    );
    for report in reports {
        let (rate, urgent) = (&report.steady_rate, &report.urgent_under_burst);
        let _ = writeln!(
            out,
            "{:<10} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} | {:>6} {:>8.1} {:>8.1} {:>7} {:>9}",
            report.path,
            rate.jobs,
            rate.start_p50_ms,
            rate.start_p95_ms,
            rate.start_p99_ms,
            rate.start_max_ms,
            rate.finish_p50_ms,
            rate.finish_p99_ms,
            urgent.jobs,
            urgent.start_p95_ms,
            urgent.start_p99_ms,
            urgent.bulk_jobs,
            urgent.bulk_left_at_end
        );
    }
    out.push_str(
        "\nlatency in ms of open-loop streams, from when each job was due to arrive (its tick; a producer that falls behind counts): arrival -> handler start and arrival -> finished_at at a steady rate; urgent = arrival -> handler start of urgent jobs on their own queue while a bulk backlog drains (bulk = the backlog queued first; bulk left = bulk jobs still unfinished when the urgent stream ended)\n",
    );
    urgent_stages(&mut out, reports);
    noisy_tenant_runs(&mut out, reports);
    if reports.iter().any(|r| r.relay_alone.is_some()) {
        let _ = writeln!(
            out,
            "\n{:<10} {:>7} {:>9} {:>11} | {:>9} {:>7} {:>7} {:>7} {:>7}",
            "relay", "rows", "rows/s", "commits/row", "lag rate", "p50", "p95", "p99", "max"
        );
        for report in reports {
            let (Some(relay), Some(lag)) = (&report.relay_alone, &report.outbox_lag) else {
                continue;
            };
            let _ = writeln!(
                out,
                "{:<10} {:>7} {:>9.0} {:>11.4} | {:>9} {:>7.1} {:>7.1} {:>7.1} {:>7.1}",
                report.path,
                relay.rows,
                relay.rows_per_second,
                relay.cost.commits_per_job,
                lag.rate,
                lag.p50_ms,
                lag.p95_ms,
                lag.p99_ms,
                lag.max_ms
            );
        }
        out.push_str(
            "\nrelay = a backlog of outbox rows published (broker-confirmed) and deleted; lag = outbox insert -> delivered to a subscriber, in ms, one row per transaction at a steady rate\n",
        );
    }
    out
}

/// The single-job end-to-end runs: median, range and each run, beside the
/// plain commit rate measured just before them.
fn single_job_runs(out: &mut String, reports: &[PathReport]) {
    let _ = writeln!(
        out,
        "{:<10} {:>5} {:>9} {:>17} {:>12} {:>11} {:>9} | runs, jobs/s",
        "e2e 1/tx", "runs", "median/s", "min-max/s", "commits/job", "commit/s", "e2e/plain"
    );
    for report in reports {
        let rates: Vec<f64> = report
            .end_to_end_runs
            .iter()
            .map(|run| run.jobs_per_second)
            .collect();
        let (min, max) = rates.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
            (lo.min(*r), hi.max(*r))
        });
        let median = report.end_to_end.jobs_per_second;
        let (plain, ratio) = match &report.commit_rate {
            Some(rate) => (
                format!("{:.0} {}", rate.commits_per_second, rate.tool),
                format!("{:.2}", median / rate.commits_per_second),
            ),
            None => ("-".into(), "-".into()),
        };
        let each: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
        let _ = writeln!(
            out,
            "{:<10} {:>5} {:>9.0} {:>17} {:>12.3} {:>11} {:>9} | {}",
            report.path,
            rates.len(),
            median,
            format!("{min:.0}-{max:.0}"),
            report.end_to_end.cost.commits_per_job,
            plain,
            ratio,
            each.join(" ")
        );
    }
    out.push_str(
        "\ne2e 1/tx = producers each committing a business row and one job per transaction; commit/s = plain single-row insert transactions per second with as many clients (pgbench, or the harness's own client where pgbench is missing), measured just before; e2e/plain = median / commit/s\n\n",
    );
}

/// Where the urgent jobs' time went, stage by stage.
fn urgent_stages(out: &mut String, reports: &[PathReport]) {
    if reports.iter().all(|r| r.urgent_stages.is_empty()) {
        return;
    }
    let _ = writeln!(
        out,
        "\n{:<10} {:<32} {:>6} {:>9} {:>9} {:>9}",
        "urgent", "stage", "jobs", "p50 ms", "p95 ms", "p99 ms"
    );
    for report in reports {
        for stage in &report.urgent_stages {
            let _ = writeln!(
                out,
                "{:<10} {:<32} {:>6} {:>9.1} {:>9.1} {:>9.1}",
                report.path, stage.stage, stage.jobs, stage.p50_ms, stage.p95_ms, stage.p99_ms
            );
        }
    }
    out.push_str(
        "\nurgent stages = where the urgent jobs' time went: arrives when the stream's tick was due, enqueue and claim start from the database's timestamps (created_at, the claim's heartbeat_at), committed when the producer's commit returned, the relay's publish call, the broker's confirm and the delivery as the transport saw them, the handler's own start; each over the jobs with both ends seen; the parts' percentiles do not add up to the whole's\n",
    );
}

/// The noisy-tenant runs, caps off and on.
fn noisy_tenant_runs(out: &mut String, reports: &[PathReport]) {
    if reports.iter().all(|r| r.noisy_tenant.is_empty()) {
        return;
    }
    let _ = writeln!(
        out,
        "\n{:<10} {:>5} {:>7} {:>7} {:>6} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9} {:>9} {:>9} {:>5}",
        "noisy",
        "cap",
        "job ms",
        "noisy",
        "quiet",
        "quiet p50",
        "quiet p95",
        "quiet p99",
        "noisy/s",
        "noisy left",
        "slot p50",
        "slot p95",
        "slot p99",
        "bad"
    );
    for report in reports {
        for run in &report.noisy_tenant {
            let ms =
                |value: Option<f64>| value.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
            let _ = writeln!(
                out,
                "{:<10} {:>5} {:>7} {:>7} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>10.0} {:>10} {:>9} {:>9} {:>9} {:>5}",
                report.path,
                run.tenant_cap
                    .map_or_else(|| "off".to_owned(), |cap| cap.to_string()),
                run.job_ms,
                run.noisy_jobs,
                run.quiet_jobs,
                run.quiet_start_p50_ms,
                run.quiet_start_p95_ms,
                run.quiet_start_p99_ms,
                run.noisy_drain_per_second,
                run.noisy_left_at_end,
                ms(run.slot_handover_p50_ms),
                ms(run.slot_handover_p95_ms),
                ms(run.slot_handover_p99_ms),
                run.lost_or_repeated
            );
        }
    }
    out.push_str(
        "\nnoisy = one tenant's backlog enqueued at once; quiet = ten other tenants arriving at a steady rate while it drains, their arrival (the tick each was due) -> handler start in ms; noisy/s = the backlog's jobs per second; cap = the queue's running-jobs cap per tenant; job ms = how long each job's handler works (0: no-op jobs); slot = with a cap, how long a slot the noisy tenant freed stayed empty before its next job started (its completion's timestamp -> the next job's handler start, ms)\n",
    );
}

/// One group of bars per path, one bar per series, on a log scale.
struct BarChart<'a> {
    caption: &'a str,
    unit: &'a str,
    paths: Vec<&'a str>,
    series: Vec<(&'a str, Vec<f64>)>,
}

const COLOURS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
];

impl BarChart<'_> {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let values = self.series.iter().flat_map(|(_, v)| v.iter().copied());
        let positive: Vec<f64> = values.filter(|v| *v > 0.0).collect();
        // Head room above the tallest bar for the legend (log scale).
        let top = positive.iter().copied().fold(1.0, f64::max) * 30.0;
        let bottom = positive.iter().copied().fold(top, f64::min).min(1.0) / 2.0;
        let width = self.series.len() + 1;
        let mut chart = ChartBuilder::on(area)
            .caption(self.caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(28)
            .y_label_area_size(64)
            .build_cartesian_2d(
                0f64..(self.paths.len() * width) as f64,
                (bottom..top).log_scale(),
            )
            .map_err(|err| anyhow!("chart: {err}"))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&|_| String::new())
            .y_label_formatter(&|v| {
                if *v >= 10.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v}")
                }
            })
            .y_desc(self.unit)
            .draw()
            .map_err(|err| anyhow!("chart: {err}"))?;
        for (k, (name, values)) in self.series.iter().enumerate() {
            let colour = COLOURS[k % COLOURS.len()];
            chart
                .draw_series(values.iter().enumerate().filter(|(_, v)| **v > 0.0).map(
                    |(g, value)| {
                        let left = (g * width + k) as f64 + 0.5;
                        Rectangle::new(
                            [(left, bottom), (left + 0.9, value.max(bottom))],
                            colour.filled(),
                        )
                    },
                ))
                .map_err(|err| anyhow!("chart: {err}"))?
                .label(*name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
                });
            chart
                .draw_series(values.iter().enumerate().filter(|(_, v)| **v > 0.0).map(
                    |(g, value)| {
                        let centre = (g * width + k) as f64 + 0.95;
                        Text::new(
                            format!("{value:.0}"),
                            (centre, value.max(bottom)),
                            ("sans-serif", 10)
                                .into_font()
                                .into_text_style(area)
                                .pos(Pos::new(HPos::Center, VPos::Bottom)),
                        )
                    },
                ))
                .map_err(|err| anyhow!("chart: {err}"))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|err| anyhow!("chart: {err}"))?;
        // Path names under their groups, where the x axis has no labels.
        for (g, path) in self.paths.iter().enumerate() {
            let centre = (g * width) as f64 + 0.5 + self.series.len() as f64 * 0.5;
            let (x, y) = chart.backend_coord(&(centre, bottom));
            let (left, top) = area.get_base_pixel();
            area.draw(&Text::new(
                path.to_string(),
                (x - left, y - top + 6),
                ("sans-serif", 14)
                    .into_font()
                    .into_text_style(area)
                    .pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(|err| anyhow!("chart: {err}"))?;
        }
        Ok(())
    }
}

/// The report as an SVG chart: throughput per path on the left, latency per
/// path on the right (both on log scales, every bar labelled with its value).
pub fn chart_svg(environment: &Environment, reports: &[PathReport]) -> Result<String> {
    let paths: Vec<&str> = reports.iter().map(|r| r.path.as_str()).collect();
    let throughput = BarChart {
        caption: "throughput (higher is better)",
        unit: "jobs/s (relay: rows/s)",
        paths: paths.clone(),
        series: vec![
            (
                "drain",
                reports.iter().map(|r| r.drain.jobs_per_second).collect(),
            ),
            (
                "end to end",
                reports
                    .iter()
                    .map(|r| r.end_to_end.jobs_per_second)
                    .collect(),
            ),
            (
                "end to end, batched",
                reports
                    .iter()
                    .map(|r| r.end_to_end_batched.jobs_per_second)
                    .collect(),
            ),
            (
                "relay alone",
                reports
                    .iter()
                    .map(|r| r.relay_alone.as_ref().map_or(0.0, |x| x.rows_per_second))
                    .collect(),
            ),
        ],
    };
    let latency = BarChart {
        caption: "latency (lower is better)",
        unit: "ms",
        paths,
        series: vec![
            (
                "start p50",
                reports.iter().map(|r| r.steady_rate.start_p50_ms).collect(),
            ),
            (
                "start p99",
                reports.iter().map(|r| r.steady_rate.start_p99_ms).collect(),
            ),
            (
                "finish p99",
                reports
                    .iter()
                    .map(|r| r.steady_rate.finish_p99_ms)
                    .collect(),
            ),
            (
                "urgent start p95, bulk backlog",
                reports
                    .iter()
                    .map(|r| r.urgent_under_burst.start_p95_ms)
                    .collect(),
            ),
            (
                "outbox lag p99",
                reports
                    .iter()
                    .map(|r| r.outbox_lag.map_or(0.0, |lag| lag.p99_ms))
                    .collect(),
            ),
        ],
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1400, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(|err| anyhow!("chart: {err}"))?;
        let body = root
            .titled(
                &format!("jobwire bench: {}", header(environment)),
                ("sans-serif", 13),
            )
            .map_err(|err| anyhow!("chart: {err}"))?;
        let (left, right) = body.split_horizontally(700);
        throughput.draw(&left)?;
        latency.draw(&right)?;
        root.present().map_err(|err| anyhow!("chart: {err}"))?;
    }
    Ok(svg)
}
