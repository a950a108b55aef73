//! No orphans: a driver leads its own process group, so one signal takes the driver and
//! everything it started that stayed in the group (VMs, agent shells). While a driver runs, a
//! record of it (pid, group, start time, boot) sits in a records directory beside the outbox;
//! a worker that was killed finds its leftovers there when it starts again and kills them,
//! after checking that the process group is still the one it recorded (pids get reused).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// The records directory's name under the worker's outbox directory.
pub const RECORDS_DIR: &str = "drivers";

/// What is recorded about a running driver (`<records>/<pid>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    pid: u32,
    pgid: u32,
    /// Field 22 of `/proc/<pid>/stat`: clock ticks after boot.
    start_time: u64,
    /// `/proc/sys/kernel/random/boot_id`: start times mean nothing after a reboot.
    boot_id: String,
}

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    pgid: u32,
    start_time: u64,
    /// Dead, waiting to be reaped: nothing left to kill.
    zombie: bool,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from its end.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    Some(Stat {
        zombie: matches!(*fields.first()?, "Z" | "X"),
        pgid: fields.get(2)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

fn boot_id() -> Option<String> {
    let id = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned()).filter(|id| !id.is_empty())
}

/// The process is gone: no such process, or a zombie.
#[cfg(test)]
pub(super) fn is_gone(pid: u32) -> bool {
    stat(pid).is_none_or(|s| s.zombie)
}

/// Sends SIGKILL to the whole group. A group that is already gone is fine.
fn kill_group(pgid: u32) {
    // Never a broadcast (0, -1) or init's group.
    let Ok(raw) = i32::try_from(pgid) else { return };
    if raw <= 1 {
        return;
    }
    match killpg(Pid::from_raw(raw), Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pgid, "cannot kill the driver's process group: {e}"),
    }
}

/// A running driver's process group: killed on demand and when dropped, with its record
/// removed when dropped.
#[derive(Debug)]
pub(super) struct Group {
    pgid: Option<u32>,
    record: Option<PathBuf>,
}

impl Group {
    /// The group led by `pid` (a child started with `process_group(0)`), recorded under
    /// `records` when given.
    pub(super) fn start(pid: Option<u32>, records: Option<&Path>) -> Group {
        let record = match (pid, records) {
            (Some(pid), Some(dir)) => match write_record(dir, pid) {
                Ok(path) => Some(path),
                Err(e) => {
                    tracing::warn!(pid, dir = %dir.display(), "cannot record the driver's process group: {e}");
                    None
                }
            },
            _ => None,
        };
        Group { pgid: pid, record }
    }

    /// Kills the driver and everything left in its group.
    pub(super) fn kill(&self) {
        if let Some(pgid) = self.pgid {
            kill_group(pgid);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
        if let Some(path) = self.record.take()
            && let Err(e) = fs::remove_file(&path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), "cannot remove a driver record: {e}");
        }
    }
}

fn write_record(dir: &Path, pid: u32) -> io::Result<PathBuf> {
    let not_found = |what: &str| io::Error::new(io::ErrorKind::NotFound, what.to_owned());
    let st = stat(pid).ok_or_else(|| not_found("no /proc/<pid>/stat for the driver"))?;
    let record = Record {
        pid,
        pgid: st.pgid,
        start_time: st.start_time,
        boot_id: boot_id().ok_or_else(|| not_found("no boot id"))?,
    };
    crate::private_fs::create_dir(dir)?;
    let path = dir.join(format!("{pid}.json"));
    let tmp = dir.join(format!("{pid}.json.tmp"));
    crate::private_fs::write(
        &tmp,
        &serde_json::to_vec(&record).map_err(io::Error::other)?,
    )?;
    fs::rename(&tmp, &path)?;
    Ok(path)
}

/// The recorded group still runs and is the one recorded: its leader has the recorded start
/// time, or, with the leader gone, every member started after it (a group id stays taken while
/// the group has members, so such a group is the driver's survivors).
fn still_ours(r: &Record, now_boot: &str) -> bool {
    if r.boot_id != now_boot || r.pgid != r.pid {
        return false;
    }
    let Ok(entries) = fs::read_dir("/proc") else {
        return false;
    };
    let mut members = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .filter(|(_, s)| s.pgid == r.pgid && !s.zombie)
        .peekable();
    if members.peek().is_none() {
        return false;
    }
    let members: Vec<(u32, Stat)> = members.collect();
    match members.iter().find(|(pid, _)| *pid == r.pgid) {
        Some((_, leader)) => leader.start_time == r.start_time,
        None => members.iter().all(|(_, s)| s.start_time >= r.start_time),
    }
}

/// Kills what the drivers recorded under `records` left behind (a worker killed before it
/// could stop them), then clears the records. Call it before any driver of this worker starts.
/// Answers how many process groups were killed.
pub fn sweep_orphans(records: &Path) -> io::Result<usize> {
    let entries = match fs::read_dir(records) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let now_boot = boot_id().unwrap_or_default();
    let mut killed = 0;
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|x| x == "json") {
            let record = fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Record>(&b).ok());
            match record {
                Some(r) if still_ours(&r, &now_boot) => {
                    tracing::warn!(
                        pid = r.pid,
                        pgid = r.pgid,
                        "killing a driver left behind by an earlier worker process"
                    );
                    kill_group(r.pgid);
                    killed += 1;
                }
                Some(r) => tracing::debug!(pid = r.pid, "a driver record of a process long gone"),
                None => tracing::warn!(path = %path.display(), "unreadable driver record removed"),
            }
        }
        fs::remove_file(&path)?;
    }
    Ok(killed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    /// A `sleep` leading its own process group.
    fn leader() -> Child {
        Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .unwrap()
    }

    fn wait_gone(child: &mut Child) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn a_recorded_group_is_swept_and_a_reused_pid_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut ours = leader();
        let recorded = write_record(dir.path(), ours.id()).unwrap();
        assert!(recorded.exists());

        // A record whose start time does not match: the pid now belongs to someone else.
        let mut other = leader();
        let path = write_record(dir.path(), other.id()).unwrap();
        let mut r: Record = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        r.start_time += 1;
        fs::write(&path, serde_json::to_vec(&r).unwrap()).unwrap();
        // And one from another boot, and garbage.
        let mut old_boot = r.clone();
        old_boot.start_time -= 1;
        old_boot.boot_id = "another-boot".into();
        fs::write(
            dir.path().join("1.json"),
            serde_json::to_vec(&old_boot).unwrap(),
        )
        .unwrap();
        fs::write(dir.path().join("2.json"), b"not json").unwrap();

        assert_eq!(sweep_orphans(dir.path()).unwrap(), 1);
        assert!(wait_gone(&mut ours), "the recorded driver was killed");
        assert!(
            other.try_wait().unwrap().is_none(),
            "an unrelated process lives"
        );
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            0,
            "records cleared"
        );
        other.kill().unwrap();
        other.wait().unwrap();
        assert_eq!(sweep_orphans(&dir.path().join("none")).unwrap(), 0);
    }

    #[test]
    fn a_group_whose_leader_is_gone_is_still_swept() {
        let dir = tempfile::tempdir().unwrap();
        // A shell leads the group, starts a member, prints its pid and exits.
        let out = Command::new("sh")
            .args(["-c", "sleep 60 >/dev/null 2>&1 & echo $!"])
            .process_group(0)
            .output()
            .unwrap();
        let member: u32 = String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let st = stat(member).unwrap();
        let r = Record {
            pid: st.pgid,
            pgid: st.pgid,
            start_time: st.start_time,
            boot_id: boot_id().unwrap(),
        };
        fs::write(dir.path().join("x.json"), serde_json::to_vec(&r).unwrap()).unwrap();
        assert_eq!(sweep_orphans(dir.path()).unwrap(), 1);
        let until = Instant::now() + Duration::from_secs(5);
        while !is_gone(member) {
            assert!(Instant::now() < until, "the member survived");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn dropping_a_group_kills_it_and_removes_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = leader();
        let group = Group::start(Some(child.id()), Some(dir.path()));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        drop(group);
        assert!(wait_gone(&mut child));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
