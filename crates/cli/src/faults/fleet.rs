//! The scenario's workers and relays: real `jobwire` processes, killed with
//! SIGKILL on a timer and started again, and watched for exits nobody asked
//! for (a crash is a failed check, not a fault).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use tokio::process::{Child, Command};

/// What a process does, for the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    Worker,
    Relay,
}

/// One process to keep running: its name (also its log file's) and its
/// `jobwire` arguments.
pub(crate) struct ProcessSpec {
    pub(crate) name: String,
    pub(crate) role: Role,
    pub(crate) args: Vec<String>,
}

/// A process that exited without being killed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Crash {
    pub(crate) process: String,
    pub(crate) status: String,
    /// The end of its log, where the reason usually is.
    pub(crate) log_tail: String,
}

struct Member {
    spec: ProcessSpec,
    child: Option<Child>,
    /// When a killed process is started again.
    restart_at: Option<Instant>,
    /// Where its current run's lines begin in its log.
    run_starts_at: u64,
}

/// The processes of one scenario.
pub(crate) struct Fleet {
    exe: PathBuf,
    env: Vec<(String, String)>,
    log_dir: PathBuf,
    members: Vec<Member>,
    next_victim: usize,
    pub(crate) kills: Vec<(String, Role)>,
    pub(crate) crashes: Vec<Crash>,
}

/// How long a killed process stays dead: long enough for its leases to be
/// the sweeper's business, short enough to keep the fleet busy.
const DEAD_FOR: Duration = Duration::from_secs(1);

impl Fleet {
    /// Start every process in `specs` with `env` added to this process's
    /// environment; each one's stdout and stderr go to `<log_dir>/<name>.log`.
    pub(crate) fn start(
        specs: Vec<ProcessSpec>,
        env: Vec<(String, String)>,
        log_dir: &Path,
    ) -> Result<Fleet> {
        let exe = std::env::current_exe().context("cannot find the jobwire executable")?;
        let mut fleet = Fleet {
            exe,
            env,
            log_dir: log_dir.to_owned(),
            members: specs
                .into_iter()
                .map(|spec| Member {
                    spec,
                    child: None,
                    restart_at: None,
                    run_starts_at: 0,
                })
                .collect(),
            next_victim: 0,
            kills: Vec::new(),
            crashes: Vec::new(),
        };
        for index in 0..fleet.members.len() {
            fleet.spawn(index)?;
        }
        Ok(fleet)
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.log_dir.join(format!("{name}.log"))
    }

    fn spawn(&mut self, index: usize) -> Result<()> {
        let log_path = self.log_path(&self.members[index].spec.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?;
        let run_starts_at = log.metadata()?.len();
        let member = &mut self.members[index];
        member.run_starts_at = run_starts_at;
        let child = Command::new(&self.exe)
            .args(&member.spec.args)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", member.spec.name))?;
        member.child = Some(child);
        member.restart_at = None;
        Ok(())
    }

    /// SIGKILL the next process in turn (a fixed rotation, so a run is
    /// repeatable); it starts again after [`DEAD_FOR`].
    pub(crate) async fn kill_next(&mut self) -> Result<()> {
        for _ in 0..self.members.len() {
            let index = self.next_victim % self.members.len();
            self.next_victim += 1;
            let member = &mut self.members[index];
            let Some(mut child) = member.child.take() else {
                continue; // already dead, waiting for its restart
            };
            child.kill().await.context("SIGKILL failed")?;
            member.restart_at = Some(Instant::now() + DEAD_FOR);
            self.kills
                .push((member.spec.name.clone(), member.spec.role));
            return Ok(());
        }
        Ok(())
    }

    /// Record any process that exited on its own (and start it again, so the
    /// scenario goes on), and start killed processes whose time has come.
    pub(crate) fn tend(&mut self) -> Result<()> {
        for index in 0..self.members.len() {
            let member = &mut self.members[index];
            if let Some(child) = member.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                member.child = None;
                let name = member.spec.name.clone();
                self.crashes.push(Crash {
                    log_tail: log_tail(&self.log_path(&name)),
                    process: name,
                    status: status.to_string(),
                });
                self.spawn(index)?;
                continue;
            }
            if member.restart_at.is_some_and(|at| Instant::now() >= at) {
                self.spawn(index)?;
            }
        }
        Ok(())
    }

    /// Start every killed process now (the faults are over).
    pub(crate) fn restart_all_killed(&mut self) -> Result<()> {
        for index in 0..self.members.len() {
            if self.members[index].child.is_none() {
                self.spawn(index)?;
            }
        }
        Ok(())
    }

    /// Each process's name and what its current run has logged so far (a
    /// run that was killed said its last; only the current one can still
    /// say more).
    pub(crate) fn current_runs_logs(&self) -> Result<Vec<(String, String)>> {
        self.members
            .iter()
            .map(|member| {
                let path = self.log_path(&member.spec.name);
                let bytes = std::fs::read(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                let from = usize::try_from(member.run_starts_at)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                let text = String::from_utf8_lossy(&bytes[from..]).into_owned();
                Ok((member.spec.name.clone(), text))
            })
            .collect()
    }

    /// SIGKILL everything (the scenario is over; its checks read a still table).
    pub(crate) async fn kill_all(&mut self) {
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                let _ = child.kill().await;
            }
            member.restart_at = None;
        }
    }
}

/// The last lines of a log file, or what went wrong reading it.
fn log_tail(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(5)..].join("\n")
        }
        Err(err) => format!("(no log: {err})"),
    }
}
