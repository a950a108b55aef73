use std::time::{Duration, Instant};

use super::*;
use crate::driver::process::{DriverCommand, DriverProcess};

fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drivers.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn load_err(text: &str) -> String {
    let (_dir, path) = file(text);
    load_drivers_file(&path).unwrap_err().to_string()
}

#[test]
fn a_drivers_file_names_commands_env_and_places() {
    let (dir, path) = file(
        "[osworld]\ncommand = [\"python3\", \"driver.py\"]\nenv = [\"OPENAI_API_KEY\"]\n\
         [local]\ncommand = [\"./bin/drv\"]\ncwd = \"work\"\n\
         [abs]\ncommand = [\"drv\"]\ncwd = \"/opt/abs\"\n",
    );
    let d = load_drivers_file(&path).unwrap();
    let os = &d[&DriverName::new("osworld").unwrap()];
    assert_eq!(
        os.command,
        vec!["python3".to_owned(), "driver.py".to_owned()]
    );
    assert_eq!(os.env, ["OPENAI_API_KEY".to_owned()].into());
    // The cwd defaults to the drivers file's folder; a relative one resolves against it.
    assert_eq!(os.cwd.as_deref(), Some(dir.path().join("").as_path()));
    assert_eq!(os.user, None);
    assert_eq!(
        d[&DriverName::new("local").unwrap()].cwd,
        Some(dir.path().join("work"))
    );
    assert_eq!(
        d[&DriverName::new("abs").unwrap()].cwd,
        Some(PathBuf::from("/opt/abs"))
    );
    let offer = Drivers {
        named: d,
        ..Drivers::default()
    }
    .offer(false);
    assert_eq!(offer.drivers.len(), 3);
    assert!(!offer.campaign_commands && offer.campaigns.is_none());
}

#[test]
fn a_bad_drivers_file_is_refused_at_start_naming_the_driver() {
    let e = load_err("[osworld]\ncommand = [\"d\"]\nenv = [\"LD_PRELOAD\"]\n");
    assert!(e.contains("`osworld`") && e.contains("LD_PRELOAD"), "{e}");
    let e = load_err("[osworld]\ncommand = [\"d\"]\nenv = [\"PATH\"]\n");
    assert!(e.contains("PATH") && e.contains("never"), "{e}");
    let e = load_err("[osworld]\ncommand = []\n");
    assert!(e.contains("must name a program"), "{e}");
    let e = load_err("[\"os world\"]\ncommand = [\"d\"]\n");
    assert!(e.contains("os world"), "{e}");
    let e = load_err("[osworld]\ncommand = [\"d\"]\nenvs = [\"A\"]\n");
    assert!(e.contains("envs"), "{e}");
    let e = load_err("[osworld]\ncommand = [\"d\"]\nuser = \"no-such-user-here\"\n");
    assert!(
        e.contains("no-such-user-here") && e.contains("does not exist"),
        "{e}"
    );
    let e = Drivers::allow_env(&["API_KEY".into(), "PYTHONPATH".into()]).unwrap_err();
    assert!(e.to_string().contains("PYTHONPATH"), "{e}");
    assert_eq!(
        Drivers::allow_env(&["API_KEY".into()]).unwrap(),
        ["API_KEY".to_owned()].into()
    );
}

#[test]
fn only_a_root_worker_may_run_a_driver_as_another_user() {
    let not_root = RunAs {
        uid: 4242,
        gid: 4242,
    };
    let e = run_as("root", not_root).unwrap_err();
    assert!(e.contains("needs a worker running as root"), "{e}");
    // The worker's own account needs no switch.
    let me = current_account();
    let mine = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(me.uid))
        .unwrap()
        .map(|u| u.name);
    if let Some(name) = mine
        && nix::unistd::User::from_name(&name)
            .unwrap()
            .is_some_and(|u| u.gid.as_raw() == me.gid)
    {
        assert_eq!(run_as(&name, me), Ok(None));
    }
}

/// A root worker starts a driver as the configured user, with that user's group and no
/// supplementary groups (the worker's are dropped).
#[tokio::test]
async fn a_driver_runs_as_its_user_without_the_worker_groups() {
    let me = current_account();
    let Ok(Some(nobody)) = nix::unistd::User::from_name("nobody") else {
        return;
    };
    if me.uid != 0 {
        // Only a root worker can switch accounts; the refusal is tested above.
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let script = dir.path().join("ids.py");
    std::fs::write(
        &script,
        "import os, sys\nopen(sys.argv[1], 'w').write(f'{os.getuid()} {os.getgid()} {os.getgroups()}')\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.path().join("ids.txt");
    let (_d, path) = file(&format!(
        "[ids]\ncommand = [\"python3\", {:?}, {:?}]\ncwd = {:?}\nuser = \"nobody\"\n",
        script.display().to_string(),
        out.display().to_string(),
        dir.path().display().to_string()
    ));
    let d = load_drivers_file(&path).unwrap();
    let local = &d[&DriverName::new("ids").unwrap()];
    let want = RunAs {
        uid: nobody.uid.as_raw(),
        gid: nobody.gid.as_raw(),
    };
    assert_eq!(local.user, Some(want));
    let _p = DriverProcess::spawn(&DriverCommand {
        program: local.command[0].clone(),
        args: local.command[1..].to_vec(),
        cwd: local.cwd.clone(),
        env: Vec::new(),
        user: local.user,
        record_dir: None,
    })
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        match std::fs::read_to_string(&out) {
            Ok(t) if !t.is_empty() => break t,
            _ if Instant::now() > deadline => panic!("the driver never wrote its ids"),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    assert_eq!(text, format!("{} {} []", want.uid, want.gid));
}
