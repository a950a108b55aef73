//! Bounded waits on a campaign through the CampaignService: until an attempt reaches its agent
//! phase, until the campaign ends, and its event cursor (a test that must show something did
//! not happen waits for a later, positive sign first, then checks that the cursor stood still).

use std::time::{Duration, Instant};

use lanes_common::proto as pb;

use crate::coordinator::CLIENT_TOKEN;
use crate::lane_client::{Client, client};

/// The campaign's status.
pub async fn status(c: &mut Client, id: &str) -> pb::CampaignStatus {
    c.get(pb::GetRequest { id: id.into() })
        .await
        .expect("get a campaign")
        .into_inner()
}

/// The cursor of the campaign's next event: it moves with every attempt started, phase,
/// outcome, final trial, gate and stop.
pub async fn cursor(c: &mut Client, id: &str) -> u64 {
    status(c, id).await.events_total
}

/// Bounded wait until an attempt of campaign `id` is in its agent phase; returns its token.
pub async fn wait_for_agent(c: &mut Client, id: &str) -> pb::Token {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = status(c, id).await;
        if let Some(f) = st
            .in_flight
            .iter()
            .find(|f| f.phase == pb::Phase::Agent as i32)
        {
            return f.token.clone().expect("a token");
        }
        assert!(
            Instant::now() < deadline,
            "no attempt of {id} reached the agent phase"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (bounded) until the campaign leaves `running`/`stopping`; returns its status.
pub async fn wait_ended(url: &str, id: &str, within: Duration) -> pb::CampaignStatus {
    let mut c = client(url, Some(CLIENT_TOKEN)).await;
    let deadline = Instant::now() + within;
    loop {
        let st = status(&mut c, id).await;
        if st.state == pb::CampaignState::Done as i32
            || st.state == pb::CampaignState::Stopped as i32
        {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "campaign {id} did not end within {within:?}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
