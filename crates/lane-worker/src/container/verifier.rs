//! What a Harbor verifier leaves behind, read into a score: `/logs/verifier/reward.json` (an
//! object of numbers; the score is its `reward`) or else `reward.txt` (one number). No reward,
//! or one that is not a finite number, is an evaluator error: never a score.

use lanes_common::row::Check;
use serde_json::Value;

use crate::driver::protocol::EvaluateResult;

/// Why the verifier's output is not a score.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewardError {
    #[error("the verifier wrote no /logs/verifier/reward.json or reward.txt")]
    Missing,
    #[error("{file}: {reason}")]
    Invalid { file: &'static str, reason: String },
}

/// The most test output kept in the row's checks.
const MAX_DETAIL_BYTES: usize = 4000;

/// Reads the reward files' contents (`None` when absent) into the evaluation: the score is
/// the reward, `passed` is a reward of at least 1, and every other named reward and the
/// test output become checks.
pub fn read(
    json: Option<&str>,
    txt: Option<&str>,
    test_output: &str,
) -> Result<EvaluateResult, RewardError> {
    let mut checks = Vec::new();
    let score = match (json, txt) {
        (Some(text), _) => {
            let invalid = |reason: String| RewardError::Invalid {
                file: "reward.json",
                reason,
            };
            let v: Value =
                serde_json::from_str(text.trim()).map_err(|e| invalid(format!("not JSON: {e}")))?;
            let obj = v
                .as_object()
                .ok_or_else(|| invalid("not an object of numbers".to_owned()))?;
            let mut reward = None;
            for (name, value) in obj {
                let n = value
                    .as_f64()
                    .filter(|n| n.is_finite())
                    .ok_or_else(|| invalid(format!("`{name}` is not a finite number")))?;
                if name == "reward" {
                    reward = Some(n);
                } else {
                    checks.push(Check {
                        name: name.clone(),
                        passed: n >= 1.0,
                        score: Some(n),
                        detail: String::new(),
                    });
                }
            }
            reward.ok_or_else(|| invalid("no `reward` key".to_owned()))?
        }
        (None, Some(text)) => text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .ok_or_else(|| RewardError::Invalid {
                file: "reward.txt",
                reason: format!(
                    "not one finite number: {:?}",
                    super::runtime::tail(text, 80)
                ),
            })?,
        (None, None) => return Err(RewardError::Missing),
    };
    checks.push(Check {
        name: "test_output".to_owned(),
        passed: score >= 1.0,
        score: None,
        detail: super::runtime::tail(test_output, MAX_DETAIL_BYTES),
    });
    Ok(EvaluateResult {
        score,
        passed: score >= 1.0,
        checks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reward_json_wins_and_its_other_rewards_are_checks() {
        let r = read(
            Some(r#"{"reward": 1, "format": 0.5}"#),
            Some("0"),
            "all good\n",
        )
        .unwrap();
        assert_eq!((r.score, r.passed), (1.0, true));
        assert_eq!(r.checks[0].name, "format");
        assert_eq!(r.checks[0].score, Some(0.5));
        assert!(!r.checks[0].passed);
        assert_eq!(r.checks[1].detail, "all good");
    }

    #[test]
    fn reward_txt_is_one_number_and_below_one_does_not_pass() {
        let r = read(None, Some(" 0.25\n"), "").unwrap();
        assert_eq!((r.score, r.passed), (0.25, false));
    }

    #[test]
    fn no_reward_or_a_bad_one_is_never_a_score() {
        assert_eq!(read(None, None, ""), Err(RewardError::Missing));
        for (json, txt) in [
            (Some("{\"reward\": \"1\"}"), None),
            (Some("{\"score\": 1}"), None),
            (Some("[1]"), None),
            (Some("{\"reward\": 1e999}"), None),
            (None, Some("nan")),
            (None, Some("inf")),
            (None, Some("")),
            (None, Some("1 2")),
        ] {
            assert!(read(json, txt, "").is_err(), "{json:?} {txt:?}");
        }
    }
}
