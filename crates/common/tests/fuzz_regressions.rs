//! Regressions for what the fuzz targets (`fuzz/`, docs/SECURITY.md "Fuzzing") found, one
//! test per finding; the inputs themselves are in `fuzz/corpus/<target>/` and replayed by
//! `crates/fuzz-entry`.

use lanes_common::ids::{Token, TrialId};
use lanes_common::proto as pb;
use lanes_common::row::{Check, Outcome, Status};

fn completed() -> Outcome {
    let t = Token {
        trial_id: TrialId::new("t1.r0.a").unwrap(),
        attempt: 1,
    };
    let mut o = Outcome::new(
        t,
        "w-0".parse().unwrap(),
        "h".parse().unwrap(),
        Status::Completed,
    );
    o.result.score = Some(1.0);
    o
}

fn refused_field(o: Outcome) -> String {
    Outcome::try_from(pb::Outcome::from(o)).unwrap_err().field
}

/// `lane_messages`: an outcome with a NaN phase wall was accepted; its row's JSON then held
/// `null` for the wall (and for `wall_s`), and the row no longer read back.
#[test]
fn a_phase_wall_that_is_not_a_finite_duration_is_refused() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0] {
        let mut o = completed();
        o.result.walls.boot_s = bad;
        assert_eq!(refused_field(o), "outcome.walls.boot_s", "{bad}");
        let mut o = completed();
        o.result.walls.publish_s = bad;
        assert_eq!(refused_field(o), "outcome.walls.publish_s", "{bad}");
    }
    let mut o = completed();
    o.result.walls.agent_s = 12.5;
    assert_eq!(Outcome::try_from(pb::Outcome::from(o.clone())), Ok(o));
}

/// Same class: a NaN check score reached the row as `null`, and read back as no score.
#[test]
fn a_check_score_that_is_not_finite_is_refused() {
    for bad in [f64::NAN, f64::INFINITY] {
        let mut o = completed();
        o.result.checks = vec![Check {
            name: "c".into(),
            passed: true,
            score: Some(bad),
            detail: String::new(),
        }];
        assert_eq!(refused_field(o), "outcome.checks.score", "{bad}");
    }
}
