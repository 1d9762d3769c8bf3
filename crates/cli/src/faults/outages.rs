//! Whether every loop that logged failures also logged that they ended.
//! After a restart of PostgreSQL or a broker, each loop of a worker or a
//! relay logs a WARN line per failed attempt, then one INFO line once it
//! works again ("claiming again after 4 failures over 6.2s"). A loop that
//! stays silent instead reads, at 3 a.m., like one that gave up; so the
//! scenario checks each process's current run for a failure with no such
//! line after it.

use std::collections::BTreeSet;

/// A loop's failure lines, and the line it logs once its failures end.
/// Only loops that retry at once are here: the maintenance loops (sweeper,
/// reconciler, scheduler, retention) say it too, but at their next
/// interval, which a scenario may end before.
const LOOPS: &[(&[&str], &str)] = &[
    (&["claim failed; backing off"], "claiming again"),
    (
        &["writing outcomes failed; retrying"],
        "writing outcomes again",
    ),
    (&["receive failed; retrying"], "receiving again"),
    (&["relay pass failed; retrying"], "relay passes work again"),
    (
        &[
            "cannot open a LISTEN connection",
            "LISTEN failed; retrying",
            "LISTEN connection dropped",
            "LISTEN connection failed",
        ],
        "listening again",
    ),
];

/// The fields that tell two loops of one kind in a process apart.
const KEYS: [&str; 3] = ["queue=", "topic=", "channel="];

/// The loops in `log` whose last failure has no line after it saying the
/// failures ended, each as the line it lacks and the loop's key.
pub(crate) fn unended(log: &str) -> Vec<String> {
    let mut open = BTreeSet::new();
    for line in log.lines() {
        for (index, (failures, ended)) in LOOPS.iter().enumerate() {
            if failures.iter().any(|failure| line.contains(failure)) {
                open.insert((index, key(line)));
            } else if line.contains(ended) {
                open.remove(&(index, key(line)));
            }
        }
    }
    open.into_iter()
        .map(|(index, key)| format!("no \"{}\" after its failures{key}", LOOPS[index].1))
        .collect()
}

/// The first key field of a log line (` queue=default`), or nothing. The
/// first in the line, not the first of [`KEYS`]: a field's value (an error
/// text, after the key) may hold ` queue=` too.
fn key(line: &str) -> String {
    KEYS.iter()
        .filter_map(|name| line.find(&format!(" {name}")))
        .min()
        .and_then(|at| line[at + 1..].split_whitespace().next())
        .map(|field| format!(" ({field})"))
        .unwrap_or_default()
}

/// Whether `log` holds INFO lines: the ending lines are INFO, so a log
/// whose filter hides them cannot show an outage ended.
pub(crate) fn shows_info_lines(log: &str) -> bool {
    log.lines().any(|line| line.contains(" INFO "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLAIM_FAILED: &str = "2026-12-06T10:00:00Z  WARN jobwire_consumer::postgres_path: claim failed; backing off queue=a error=connection refused";

    #[test]
    fn a_failure_needs_its_loop_s_line_after_it() {
        assert!(unended("").is_empty());
        assert_eq!(
            unended(CLAIM_FAILED),
            vec!["no \"claiming again\" after its failures (queue=a)"]
        );
        let ended = format!(
            "{CLAIM_FAILED}\n{CLAIM_FAILED}\n2026-12-06T10:00:03Z  INFO jobwire_consumer::postgres_path: claiming again after 2 failures over 3s queue=a"
        );
        assert!(unended(&ended).is_empty(), "{:?}", unended(&ended));
    }

    #[test]
    fn another_loop_s_line_does_not_end_it() {
        let other_queue =
            format!("{CLAIM_FAILED}\n INFO x: claiming again after 1 failure over 1s queue=b");
        assert_eq!(
            unended(&other_queue).len(),
            1,
            "queue b's line says nothing of queue a"
        );
        let other_loop =
            format!("{CLAIM_FAILED}\n INFO x: listening again after 1 failure over 1s queue=a");
        assert_eq!(
            unended(&other_loop).len(),
            1,
            "the LISTEN loop's line says nothing of claims"
        );
        let failed_again =
            format!(" INFO x: claiming again after 1 failure over 1s queue=a\n{CLAIM_FAILED}");
        assert_eq!(
            unended(&failed_again).len(),
            1,
            "the line must come after the last failure"
        );
    }

    #[test]
    fn the_key_is_the_lines_first_key_field() {
        let failed = " WARN x: receive failed; retrying topic=t1 address=a error=bad queue=q9 here";
        let ended = " INFO x: receiving again after 1 failure over 1s topic=t1 address=a";
        assert!(unended(&format!("{failed}\n{ended}")).is_empty());
        assert_eq!(
            unended(failed),
            vec!["no \"receiving again\" after its failures (topic=t1)"]
        );
        // A loop with no key field (the relay's passes) is one loop.
        let relay = " WARN r: relay pass failed; retrying error=x\n INFO r: relay passes work again after 1 failure over 2s";
        assert!(unended(relay).is_empty());
    }

    #[test]
    fn a_log_without_info_lines_cannot_show_an_ending() {
        assert!(!shows_info_lines(CLAIM_FAILED));
        assert!(shows_info_lines(&format!(
            "{CLAIM_FAILED}\n2026-12-06T10:00:00Z  INFO w: worker started"
        )));
    }

    #[test]
    fn every_listen_failure_is_one_loop() {
        let log = " WARN jobwire_loop::listen: LISTEN connection dropped; reconnecting channel=jobwire_wake\n WARN jobwire_loop::listen: cannot open a LISTEN connection; polling meanwhile channel=jobwire_wake error=x\n INFO jobwire_loop::listen: listening again after 2 failures over 1.5s channel=jobwire_wake";
        assert!(unended(log).is_empty(), "{:?}", unended(log));
    }
}
