//! The bench campaign after the run, in a Redis store: deleted, unless `--keep-campaign`.
//! A 20,000-trial run leaves ~50 MB of rows, trials and events behind, which the runs after it
//! would share the machine with (Redis rewriting its AOF), and which real users of a shared
//! Redis do not want. The embedded store lives in a temp directory removed with the bench.

use std::time::{Duration, Instant};

use serde::Serialize;

use lanes_common::proto as pb;

use super::{CALL_TIMEOUT, POLL};

/// How long a stopped campaign's last attempts may take to end before the bench gives up
/// deleting it.
const SETTLE: Duration = Duration::from_secs(10);

/// What became of the bench campaign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Cleanup {
    /// Deleted from the store.
    Deleted,
    /// Kept, as `--keep-campaign` asked.
    Kept,
    /// Still in the store, for this reason (`lanes delete` removes it once it runs nothing).
    Left(String),
}

impl Cleanup {
    /// The report's line about it.
    pub(crate) fn describe(&self, campaign: &str) -> String {
        match self {
            Self::Deleted => format!("deleted from the store after the run ({campaign})"),
            Self::Kept => format!("kept in the store (--keep-campaign): {campaign}"),
            Self::Left(why) => format!("left in the store ({campaign}): {why}"),
        }
    }
}

/// Deletes `campaign`, which the bench stopped unless it was done. A stopped campaign is
/// refused while its last attempts end (the lanes were told to stop), so a refusal is tried
/// again for a while.
pub(crate) async fn delete(client: &mut crate::client::Client, campaign: &str) -> Cleanup {
    let until = Instant::now() + SETTLE;
    loop {
        let request = pb::DeleteRequest {
            id: campaign.to_owned(),
            keep_artifacts: false,
        };
        match tokio::time::timeout(CALL_TIMEOUT, client.delete(request)).await {
            Ok(Ok(_)) => return Cleanup::Deleted,
            Ok(Err(s)) if s.code() == tonic::Code::FailedPrecondition && Instant::now() < until => {
                tokio::time::sleep(POLL).await;
            }
            Ok(Err(s)) => return Cleanup::Left(lanes_dial::explain_status(&s)),
            Err(_) => return Cleanup::Left(format!("no answer within {CALL_TIMEOUT:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_fate_says_where_the_campaign_is() {
        assert_eq!(
            Cleanup::Deleted.describe("bench-1"),
            "deleted from the store after the run (bench-1)"
        );
        assert!(
            Cleanup::Kept
                .describe("bench-1")
                .contains("--keep-campaign")
        );
        assert_eq!(
            serde_json::to_value(Cleanup::Left("it runs".into())).unwrap(),
            serde_json::json!({ "left": "it runs" })
        );
        assert_eq!(
            serde_json::to_value(Cleanup::Deleted).unwrap(),
            serde_json::json!("deleted")
        );
    }
}
