//! A campaign's `[driver]`: a named driver, and the env names it may set or read. Reserved
//! variables (`PATH`, `LD_*`, `PYTHON*`, `LANES_*`, ...) are refused with the variable named,
//! by the file loader and by `CampaignSpec::validate`, which checks a spec submitted over gRPC.

use std::path::Path;

use lanes_common::proto as pb;
use lanes_common::spec::{self, Campaign, DriverKind, SpecErrorKind};

fn text(driver: &str) -> String {
    format!(
        "id = \"c\"\nphase1_runs = 1\nschedule_seed = 1\n[[arms]]\nid = \"a\"\n[tasks]\nitems = [{{ id = \"T\" }}]\n[driver]\n{driver}\n"
    )
}

fn load(driver: &str) -> Result<Campaign, spec::SpecError> {
    spec::load_str(&text(driver), Path::new("c.toml"), Path::new("."))
}

/// A spec as a client could send it: built from a valid file, then edited past the loader.
fn submit_with_env(name: &str, value: &str) -> Result<Campaign, String> {
    let mut c = load("command = [\"d\"]").unwrap();
    c.spec.driver.env.insert(name.into(), value.into());
    let req = pb::SubmitRequest::try_from(&c).unwrap();
    Campaign::try_from(req).map_err(|e| e.to_string())
}

#[test]
fn reserved_env_names_are_refused_at_file_load_naming_the_variable() {
    for name in [
        "LD_PRELOAD",
        "PATH",
        "PYTHONPATH",
        "NODE_OPTIONS",
        "BASH_ENV",
        "HOME",
        "LANES_LANE_TOKEN",
    ] {
        let e = load(&format!("command = [\"d\"]\nenv = {{ {name} = \"x\" }}")).unwrap_err();
        assert_eq!(e.field, format!("driver.env.{name}"));
        assert!(matches!(*e.kind, SpecErrorKind::Env(_)), "{e}");
        let shown = e.to_string();
        assert!(shown.contains(name) && shown.contains("never"), "{shown}");
    }
    // Reading a reserved variable of the worker is refused the same way.
    let e = load("command = [\"d\"]\nenv = { TOKEN = \"$LANES_LANE_TOKEN\" }").unwrap_err();
    assert_eq!(e.field, "driver.env.TOKEN");
    assert!(e.to_string().contains("LANES_LANE_TOKEN"), "{e}");
    // Not a variable name at all.
    let e = load("command = [\"d\"]\nenv = { \"A-B\" = \"x\" }").unwrap_err();
    assert!(e.to_string().contains("A-B"), "{e}");
    let e = load("command = [\"d\"]\nenv = { K = \"$1X\" }").unwrap_err();
    assert!(e.to_string().contains("1X"), "{e}");
    // Allowed names load.
    let c =
        load("command = [\"d\"]\nenv = { OPENAI_API_KEY = \"$OPENAI_API_KEY\", LOG = \"info\" }")
            .unwrap();
    assert_eq!(c.spec.driver.env.len(), 2);
}

#[test]
fn reserved_env_names_are_refused_in_a_submitted_spec_naming_the_variable() {
    for name in ["LD_PRELOAD", "PATH", "PYTHONPATH"] {
        let e = submit_with_env(name, "x").unwrap_err();
        assert!(
            e.contains(&format!("spec_json.driver.env.{name}")) && e.contains("never"),
            "{e}"
        );
    }
    let e = submit_with_env("K", "$PYTHONSTARTUP").unwrap_err();
    assert!(e.contains("PYTHONSTARTUP"), "{e}");
    let e = submit_with_env("A=B", "x").unwrap_err();
    assert!(e.contains("A=B"), "{e}");
    assert!(submit_with_env("OPENAI_API_KEY", "$OPENAI_API_KEY").is_ok());
}

#[test]
fn a_driver_is_named_like_an_id_and_is_one_of_name_command_sim() {
    let c = load("name = \"osworld\"").unwrap();
    assert!(matches!(&c.spec.driver.kind, DriverKind::Named(n) if n.as_str() == "osworld"));
    let e = load("name = \"os world\"").unwrap_err();
    assert_eq!(e.field, "driver.name");
    for both in [
        "name = \"osworld\"\ncommand = [\"d\"]",
        "name = \"osworld\"\nsim = {}",
        "command = [\"d\"]\nsim = {}",
    ] {
        let e = load(both).unwrap_err();
        assert!(e.to_string().contains("exactly one"), "{e}");
    }
    // A named driver travels as JSON and back.
    let req = pb::SubmitRequest::try_from(&c).unwrap();
    assert_eq!(Campaign::try_from(req).unwrap().spec, c.spec);
}

#[test]
fn an_env_over_its_limits_is_refused_naming_the_entry_and_the_limit() {
    use lanes_common::limits::{
        MAX_DRIVER_ENV, MAX_DRIVER_ENV_NAME_BYTES, MAX_DRIVER_ENV_VALUE_BYTES,
    };
    // 20,000 entries and a 1 MiB value used to be taken, then copied into every assignment.
    let entries = |n: usize| -> String { (0..n).map(|i| format!("V{i} = \"x\"\n")).collect() };
    let c = load(&format!(
        "command = [\"d\"]\n[driver.env]\n{}",
        entries(MAX_DRIVER_ENV)
    ))
    .unwrap();
    assert_eq!(c.spec.driver.env.len(), MAX_DRIVER_ENV);
    let e = load(&format!(
        "command = [\"d\"]\n[driver.env]\n{}",
        entries(MAX_DRIVER_ENV + 1)
    ))
    .unwrap_err();
    assert_eq!(e.field, "driver.env");
    assert!(e.line.is_some(), "{e}");
    assert!(e.to_string().contains("more than 256 env variables"), "{e}");

    let big = "v".repeat(MAX_DRIVER_ENV_VALUE_BYTES + 1);
    let e = load(&format!("command = [\"d\"]\nenv = {{ BIG = \"{big}\" }}")).unwrap_err();
    assert_eq!(e.field, "driver.env.BIG");
    assert!(
        e.to_string()
            .contains("is 4097 bytes, over the limit of 4096 bytes"),
        "{e}"
    );
    let name = "N".repeat(MAX_DRIVER_ENV_NAME_BYTES + 1);
    let e = load(&format!("command = [\"d\"]\nenv = {{ {name} = \"x\" }}")).unwrap_err();
    assert!(
        e.to_string().contains("257 bytes, over the limit of 256"),
        "{e}"
    );

    // A submitted spec is held to the same limits.
    let e = submit_with_env("BIG", &big).unwrap_err();
    assert!(
        e.contains("spec_json.driver.env.BIG") && e.contains("over the limit of 4096 bytes"),
        "{e}"
    );
    let mut c = load("command = [\"d\"]").unwrap();
    c.spec.driver.env = (0..20_000)
        .map(|i| (format!("V{i}"), "x".to_owned()))
        .collect();
    let e = Campaign::try_from(pb::SubmitRequest::try_from(&c).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("spec_json.driver.env") && e.contains("more than 256 env variables"),
        "{e}"
    );
}
