use std::path::Path;

use super::*;
use crate::spec::load_str;

fn spec(driver: &str) -> CampaignSpec {
    let text = format!(
        "id = \"c\"\nphase1_runs = 1\nschedule_seed = 1\n[[arms]]\nid = \"a\"\n[tasks]\nitems = [{{ id = \"T\" }}]\n[driver]\n{driver}\n"
    );
    load_str(&text, Path::new("c.toml"), Path::new("."))
        .unwrap_or_else(|e| panic!("{e}"))
        .spec
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn osworld() -> DriverName {
    DriverName::new("osworld").unwrap()
}

#[test]
fn nothing_is_offered_by_default_but_the_sim() {
    let none = WorkerOffer::default();
    assert_eq!(none.refusal(&spec("sim = {}")), None);
    // The sim receives no env, so a sim campaign's env is never a reason to refuse it.
    assert_eq!(
        none.refusal(&spec("sim = {}\nenv = { KEY = \"$KEY\" }")),
        None
    );
    assert_eq!(
        none.refusal(&spec("command = [\"python3\", \"d.py\"]")),
        Some(DriverRefusal::CampaignCommand)
    );
    let refusal = none.refusal(&spec("name = \"osworld\"")).unwrap();
    assert_eq!(refusal, DriverRefusal::MissingDriver { driver: osworld() });
    assert!(refusal.to_string().contains("`osworld`"), "{refusal}");
}

#[test]
fn a_named_driver_takes_only_the_env_names_it_allows() {
    let offer = WorkerOffer {
        drivers: [(osworld(), names(&["OPENAI_API_KEY"]))].into(),
        ..WorkerOffer::default()
    };
    let ok = "name = \"osworld\"\nenv = { OPENAI_API_KEY = \"$OPENAI_API_KEY\" }";
    assert_eq!(offer.refusal(&spec(ok)), None);
    // Setting an allowed name from a source that is not allowed: the source is named.
    let other_source = "name = \"osworld\"\nenv = { OPENAI_API_KEY = \"$AWS_SECRET_ACCESS_KEY\" }";
    assert_eq!(
        offer.refusal(&spec(other_source)),
        Some(DriverRefusal::EnvNotAllowed {
            name: "AWS_SECRET_ACCESS_KEY".into(),
            allowlist: Allowlist::Driver(osworld()),
        })
    );
    let other_name = "name = \"osworld\"\nenv = { LOG_LEVEL = \"debug\" }";
    let refusal = offer.refusal(&spec(other_name)).unwrap();
    assert!(refusal.to_string().contains("`LOG_LEVEL`"), "{refusal}");
    // Campaign commands stay refused on a worker that only has named drivers.
    assert_eq!(
        offer.refusal(&spec("command = [\"d\"]")),
        Some(DriverRefusal::CampaignCommand)
    );
}

#[test]
fn campaign_commands_take_the_worker_allowlist_and_the_override_serves_all() {
    let offer = WorkerOffer {
        campaign_commands: true,
        command_env: names(&["KEY"]),
        ..WorkerOffer::default()
    };
    assert_eq!(
        offer.refusal(&spec("command = [\"d\"]\nenv = { KEY = \"v\" }")),
        None
    );
    assert_eq!(
        offer.refusal(&spec("command = [\"d\"]\nenv = { OTHER = \"v\" }")),
        Some(DriverRefusal::EnvNotAllowed {
            name: "OTHER".into(),
            allowlist: Allowlist::Worker
        })
    );
    let over = WorkerOffer {
        driver_override: true,
        ..WorkerOffer::default()
    };
    assert_eq!(over.refusal(&spec("name = \"osworld\"")), None);
    assert_eq!(over.refusal(&spec("command = [\"d\"]")), None);
    assert!(
        over.refusal(&spec("command = [\"d\"]\nenv = { K = \"v\" }"))
            .is_some()
    );
}

#[test]
fn a_reserved_name_is_refused_even_if_a_spec_bypassed_validation() {
    let mut s = spec("command = [\"d\"]");
    s.driver.env.insert("LD_PRELOAD".into(), "/x.so".into());
    let offer = WorkerOffer {
        campaign_commands: true,
        command_env: names(&["LD_PRELOAD"]),
        ..WorkerOffer::default()
    };
    assert_eq!(
        offer.refusal(&s),
        Some(DriverRefusal::EnvReserved {
            name: "LD_PRELOAD".into()
        })
    );
}

#[test]
fn the_campaign_filter() {
    let c = |s: &str| CampaignId::new(s).unwrap();
    assert!(WorkerOffer::default().takes_campaign(&c("any")));
    let only = WorkerOffer {
        campaigns: Some([c("mine")].into()),
        ..WorkerOffer::default()
    };
    assert!(only.takes_campaign(&c("mine")));
    assert!(!only.takes_campaign(&c("other")));
}

#[test]
fn container_campaigns_run_only_where_a_runtime_is_declared() {
    let none = WorkerOffer::default();
    let refusal = none.refusal(&spec("container = {}")).unwrap();
    assert_eq!(refusal, DriverRefusal::ContainerRuntime);
    assert!(
        refusal.to_string().contains("--container-runtime"),
        "{refusal}"
    );
    let with = WorkerOffer {
        containers: true,
        command_env: names(&["ANTHROPIC_API_KEY"]),
        ..WorkerOffer::default()
    };
    assert_eq!(with.refusal(&spec("container = {}")), None);
    // The agent's env goes through the worker's --allow-env.
    assert_eq!(
        with.refusal(&spec(
            "container = {}\nenv = { ANTHROPIC_API_KEY = \"$ANTHROPIC_API_KEY\" }"
        )),
        None
    );
    assert!(
        with.refusal(&spec("container = {}\nenv = { OTHER = \"x\" }"))
            .is_some()
    );
    // A runtime's own settings are never a campaign's.
    let text = "id = \"c\"\nphase1_runs = 1\nschedule_seed = 1\n[[arms]]\nid = \"a\"\n[tasks]\n\
                items = [{ id = \"T\" }]\n[driver]\ncontainer = {}\n\
                env = { CONTAINERS_CONF = \"/tmp/x\" }\n";
    let refused = load_str(text, Path::new("c.toml"), Path::new(".")).unwrap_err();
    assert!(refused.to_string().contains("CONTAINERS_CONF"), "{refused}");
}
