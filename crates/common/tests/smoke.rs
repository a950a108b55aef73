//! Smoke runs derived from a campaign: their own id, the selection, no phase 2, and a spec
//! hash of their own that names the main campaign's.

use std::path::Path;

use lanes_common::smoke::{SmokeError, SmokeSelection, derive};
use lanes_common::spec::{self, Campaign};
use lanes_common::spec_hash::spec_hash;

fn campaign(id: &str) -> Campaign {
    let text = format!(
        "id = \"{id}\"\nphase1_runs = 3\nphase2_runs = 2\nschedule_seed = 9\n\
         [[arms]]\nid = \"a\"\n[[arms]]\nid = \"b\"\n[[arms]]\nid = \"c\"\n\
         [tasks]\nitems = [{{ id = \"easy-1\" }}, {{ id = \"easy-2\" }}, {{ id = \"hard-1\" }}]\n\
         [driver]\nsim = {{}}\n"
    );
    spec::load_str(&text, Path::new("c.toml"), Path::new(".")).unwrap()
}

#[test]
fn a_smoke_run_keeps_the_selection_and_drops_phase_2() {
    let main = campaign("study");
    let smoke = derive(
        &main,
        &SmokeSelection {
            tasks: Some("easy-*".into()),
            arms: Some(vec!["c".into(), "a".into()]),
            runs: None,
        },
    )
    .unwrap();
    assert_eq!(smoke.spec.id.as_str(), "study-smoke");
    let tasks: Vec<&str> = smoke.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(tasks, ["easy-1", "easy-2"]);
    let arms: Vec<&str> = smoke.spec.arms.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(arms, ["a", "c"], "the campaign's arm order");
    assert_eq!((smoke.spec.phase1_runs, smoke.spec.phase2_runs), (1, 0));
    let origin = smoke.spec.smoke.as_ref().unwrap();
    assert_eq!(origin.campaign.as_str(), "study");
    assert_eq!(origin.spec_hash, spec_hash(&main.spec, &main.tasks));
    smoke.spec.validate().unwrap();

    // Its hash is its own, and names the main campaign's: the same subset of a changed
    // campaign is a different smoke run.
    let mut plain = smoke.clone();
    plain.spec.smoke = None;
    assert_ne!(
        spec_hash(&smoke.spec, &smoke.tasks),
        spec_hash(&plain.spec, &plain.tasks)
    );
    // It travels as JSON and back.
    let json = serde_json::to_string(&smoke.spec).unwrap();
    assert_eq!(
        serde_json::from_str::<spec::CampaignSpec>(&json).unwrap(),
        smoke.spec
    );
    assert!(!serde_json::to_string(&main.spec).unwrap().contains("smoke"));
}

#[test]
fn a_selection_that_cannot_run_is_refused_with_what_there_is() {
    let main = campaign("study");
    let sel = |tasks: Option<&str>, arms: Option<&[&str]>, runs| SmokeSelection {
        tasks: tasks.map(str::to_owned),
        arms: arms.map(|a| a.iter().map(|s| (*s).to_owned()).collect()),
        runs,
    };
    let e = derive(&main, &sel(Some("medium-*"), None, None)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--tasks \"medium-*\" matches none of the campaign's 3 tasks (such as easy-1, easy-2, hard-1)"
    );
    let e = derive(&main, &sel(None, Some(&["a", "z"]), None)).unwrap_err();
    assert!(matches!(e, SmokeError::UnknownArm { .. }), "{e}");
    assert!(e.to_string().contains("its arms: a, b, c"));
    assert_eq!(
        derive(&main, &sel(None, Some(&[]), None)).unwrap_err(),
        SmokeError::NoArms
    );
    assert_eq!(
        derive(&main, &sel(None, None, Some(0))).unwrap_err(),
        SmokeError::ZeroRuns
    );
    let smoke = derive(&main, &sel(None, None, None)).unwrap();
    assert!(matches!(
        derive(&smoke, &sel(None, None, None)).unwrap_err(),
        SmokeError::AlreadySmoke(_)
    ));
    let long = campaign(&"x".repeat(60));
    assert!(matches!(
        derive(&long, &sel(None, None, None)).unwrap_err(),
        SmokeError::BadId { .. }
    ));
}
