//! `lanes ui-link [CAMPAIGN]`: a one-time link into the web dashboard.

use lanes_common::proto as pb;

use super::Done;
use crate::client::Client;
use crate::exit::Code;

pub(super) async fn run(c: &mut Client, campaign: Option<String>) -> Done {
    let r = c
        .login_link(pb::LoginLinkRequest {
            campaign: campaign.unwrap_or_default(),
        })
        .await?
        .into_inner();
    println!("{}", r.url);
    eprintln!("good once, until {}", r.expires_utc);
    Ok(Code::Ok)
}
