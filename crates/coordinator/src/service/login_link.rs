//! The LoginLink rpc: a one-time login code kept in the store (by digest, bound to the
//! caller's token and optionally to a campaign), and the dashboard URL that takes it.

use tonic::Status;

use lanes_common::proto as pb;

use super::Shared;
use super::campaign::campaign_id;
use crate::auth::TokenDigest;
use crate::grpc_status::from_store;
use crate::login;

/// Issues a code for the caller whose token has digest `token` (none when the client role is
/// open), opening `campaign` (empty: the campaign list).
pub(super) async fn issue(
    s: &Shared,
    token: Option<TokenDigest>,
    campaign: &str,
) -> Result<pb::LoginLinkResponse, Status> {
    let Some(links) = &s.links else {
        return Err(Status::failed_precondition(
            "this coordinator serves no dashboard (start it with --ui-listen ADDR)",
        ));
    };
    let Some(base_url) = &links.base_url else {
        return Err(Status::failed_precondition(
            "the dashboard listens on every address, so its URL is unknown: start the \
             coordinator with --ui-public-url URL",
        ));
    };
    // The session the code opens is bound to the token that asked for it.
    let token_mark = match token {
        Some(digest) => {
            let key = s.leases.key(s.store.as_ref()).await.map_err(from_store)?;
            login::token_mark(&key.derive(login::KEY_LABEL), &digest)
        }
        None => String::new(),
    };
    let campaign = if campaign.is_empty() {
        None
    } else {
        let id = campaign_id("campaign", campaign)?;
        // An unknown campaign is refused now, not when the link is opened.
        s.store.status(&id, s.now()).await.map_err(from_store)?;
        Some(id)
    };
    let code = login::random_hex().map_err(|e| Status::internal(e.to_string()))?;
    let now = s.now();
    let expires_ms = now + links.code_ttl.as_millis() as i64;
    s.store
        .put_login_code(
            login::code_digest(&code),
            crate::store::LoginGrant {
                campaign: campaign.clone(),
                expires_ms,
                token_mark,
            },
            now,
        )
        .await
        .map_err(from_store)?;
    let next = match &campaign {
        Some(id) => format!("/campaigns/{id}"),
        None => "/".to_owned(),
    };
    Ok(pb::LoginLinkResponse {
        url: format!("{base_url}/login?code={code}&next={next}"),
        expires_utc: lanes_common::utc::format_rfc3339(expires_ms),
    })
}
