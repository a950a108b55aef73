//! `lanes stop ID [--cancel]`: drain a campaign, or cancel its attempts in flight.

use lanes_common::proto as pb;

use super::Done;
use crate::client::Client;
use crate::exit::Code;

pub(super) async fn run(c: &mut Client, id: String, cancel: bool) -> Done {
    let mode = if cancel {
        pb::StopMode::Cancel
    } else {
        pb::StopMode::Drain
    };
    let r = c
        .stop(pb::StopRequest {
            id: id.clone(),
            mode: mode as i32,
        })
        .await?
        .into_inner();
    println!("{id}: {}", crate::client::state_name(r.state));
    Ok(Code::Ok)
}
