//! `lanes bench --workers N`: the same campaign run by real `lanes worker` processes instead of
//! simulated lanes. Each worker is a child of this binary in its own process group, with its
//! own artifacts directory, the lane token through a 0600 file, and the built-in sim driver
//! (zero durations: a no-op trial), so the figure covers the whole path a user runs: the
//! worker's lane actors, its driver process, its outbox and artifacts, and the coordinator.
//! The bench learns progress from the campaign's status; it has no per-claim latencies.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use std::os::unix::process::CommandExt;

use super::coordinator_proc::{ProcUsage, proc_usage};

/// The running workers; killed (and reaped) when dropped, so no exit path leaves one behind.
pub(crate) struct WorkerProcs {
    children: Vec<Child>,
    logs: Vec<PathBuf>,
}

/// Where the workers connect and how many lanes each runs.
pub(crate) struct WorkerPlan<'a> {
    pub(crate) url: &'a str,
    pub(crate) lane_token_file: &'a Path,
    pub(crate) workers: u32,
    pub(crate) lanes: u32,
    /// Their artifacts and logs go under here.
    pub(crate) dir: &'a Path,
}

impl WorkerPlan<'_> {
    /// Lanes of worker `i`: the lanes spread as evenly as they go.
    pub(crate) fn lanes_of(&self, i: u32) -> u32 {
        self.lanes / self.workers + u32::from(i < self.lanes % self.workers)
    }
}

impl WorkerProcs {
    pub(crate) fn start(plan: &WorkerPlan<'_>) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("cannot find the lanes binary")?;
        let mut procs = Self {
            children: Vec::new(),
            logs: Vec::new(),
        };
        for i in 0..plan.workers {
            let artifacts = plan.dir.join(format!("worker-{i}"));
            let log = plan.dir.join(format!("worker-{i}.log"));
            let stderr = std::fs::File::create(&log)
                .with_context(|| format!("cannot create {}", log.display()))?;
            let mut cmd = Command::new(&exe);
            // The user's LANES_* settings are for their own workers, not these.
            for (k, _) in std::env::vars_os() {
                if k.to_string_lossy().starts_with("LANES_") {
                    cmd.env_remove(k);
                }
            }
            let id = format!("bench-worker-{i}");
            cmd.arg("worker")
                .args(["--coordinator", plan.url])
                .args(["--lanes", &plan.lanes_of(i).to_string()])
                .arg("--token-file")
                .arg(plan.lane_token_file)
                .arg("--artifacts")
                .arg(&artifacts)
                .args(["--worker-id", &id, "--host", &id])
                .args(["--shutdown-grace-s", "1"])
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                // As the coordinator: a Ctrl-C reaches only the bench, which then reports.
                .process_group(0);
            let child = cmd
                .spawn()
                .context("cannot start `lanes worker` as a child process")?;
            procs.children.push(child);
            procs.logs.push(log);
        }
        Ok(procs)
    }

    /// CPU time and memory of each worker now (a worker that exited is an error: it should
    /// run until the bench kills it).
    pub(crate) fn usage(&mut self) -> anyhow::Result<Vec<ProcUsage>> {
        let mut out = Vec::new();
        for (i, child) in self.children.iter_mut().enumerate() {
            if let Some(status) = child.try_wait()? {
                anyhow::bail!(
                    "worker {i} exited ({status}); its log:\n{}",
                    tail(&self.logs[i])
                );
            }
            out.push(proc_usage(child.id())?);
        }
        Ok(out)
    }

    pub(crate) fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// The workers' logs, for an error message.
    pub(crate) fn log_tails(&self) -> String {
        self.logs
            .iter()
            .enumerate()
            .map(|(i, l)| format!("worker {i}:\n{}", tail(l)))
            .collect()
    }

    pub(crate) fn kill(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for WorkerProcs {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last lines of a log file.
fn tail(path: &Path) -> String {
    const LINES: usize = 20;
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LINES)..]
        .iter()
        .map(|l| format!("  {l}\n"))
        .collect()
}

/// The workers' figures over the run: CPU summed, memory of the largest.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct WorkerFigures {
    pub(crate) count: u32,
    /// Their process ids (all killed and reaped when the bench ends).
    pub(crate) pids: Vec<u32>,
    /// CPU time of all workers and their driver processes' parents (user + system).
    pub(crate) cpu_s: f64,
    /// That CPU time as a percentage of one core over the same wall time.
    pub(crate) cpu_percent: f64,
    /// The largest VmHWM of one worker, in MB.
    pub(crate) peak_rss_mb: f64,
}

impl WorkerFigures {
    pub(crate) fn new(
        pids: Vec<u32>,
        before: &[ProcUsage],
        after: &[ProcUsage],
        wall: Duration,
    ) -> Self {
        let cpu: Duration = after
            .iter()
            .zip(before)
            .map(|(a, b)| a.cpu.saturating_sub(b.cpu))
            .sum();
        let cpu_s = cpu.as_secs_f64();
        Self {
            count: after.len() as u32,
            pids,
            cpu_s,
            cpu_percent: if wall.is_zero() {
                0.0
            } else {
                100.0 * cpu_s / wall.as_secs_f64()
            },
            peak_rss_mb: after.iter().map(|u| u.peak_rss).max().unwrap_or(0) as f64 / 1e6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_spread_evenly_over_workers() {
        let dir = Path::new("/tmp");
        let plan = WorkerPlan {
            url: "http://127.0.0.1:1",
            lane_token_file: dir,
            workers: 3,
            lanes: 64,
            dir,
        };
        let lanes: Vec<u32> = (0..3).map(|i| plan.lanes_of(i)).collect();
        assert_eq!(lanes, [22, 21, 21]);
        assert_eq!(lanes.iter().sum::<u32>(), 64);
    }

    #[test]
    fn figures_sum_cpu_and_keep_the_largest_memory() {
        let u = |cpu_ms, peak| ProcUsage {
            cpu: Duration::from_millis(cpu_ms),
            rss: 0,
            peak_rss: peak,
        };
        let f = WorkerFigures::new(
            vec![7, 8],
            &[u(100, 0), u(200, 0)],
            &[u(1100, 5_000_000), u(1200, 9_000_000)],
            Duration::from_secs(4),
        );
        assert_eq!(f.count, 2);
        assert!((f.cpu_s - 2.0).abs() < 1e-9);
        assert!((f.cpu_percent - 50.0).abs() < 1e-9);
        assert!((f.peak_rss_mb - 9.0).abs() < 1e-9);
    }
}
