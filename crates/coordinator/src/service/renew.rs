//! Heartbeats: a worker renews the leases its lanes hold. Each token is checked against the
//! lease issued to this worker (a mismatch ends the session with PERMISSION_DENIED), then
//! renewed with its campaign's others in one store call. Unknown campaigns answer lost; a
//! store that cannot be reached answers nothing, so the lane keeps its tokens and renews
//! again instead of losing its session.

use std::collections::BTreeMap;

use tonic::Status;

use lanes_common::convert::{lease_of, token, wire_enum};
use lanes_common::ids::{AttemptTag, CampaignId, Token};
use lanes_common::lease::LeaseSecret;
use lanes_common::proto as pb;
use lanes_common::row::Phase;
use lanes_telemetry as otel;

use super::lane::{LaneSvc, Worker};
use super::leases::LeaseRefused;
use super::trace;
use crate::grpc_status::{bad_field, from_convert};
use crate::store::{RenewState, StoreError};
use crate::wire;

/// One token of a heartbeat, checked for shape.
#[derive(Debug)]
struct Held {
    campaign: CampaignId,
    token: Token,
    phase: Phase,
    lease: LeaseSecret,
    /// The attempt's traceparent, kept only when spans are exported: a renewal that tells
    /// the lane to stop is then recorded in the attempt's trace.
    traceparent: Option<String>,
}

/// The tokens of a heartbeat, or the first malformed field, named by its index.
fn parse(items: Vec<pb::TokenPhase>, tracing: bool) -> Result<Vec<Held>, Status> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, tp)| {
            let lease = lease_of(tp.token.as_ref());
            let token = token(&format!("tokens[{i}].token"), tp.token).map_err(from_convert)?;
            let phase: Phase = wire_enum::<pb::Phase, _>(&format!("tokens[{i}].phase"), tp.phase)
                .map_err(from_convert)?;
            let campaign = CampaignId::new(&tp.campaign)
                .map_err(|e| bad_field(&format!("tokens[{i}].campaign"), e))?;
            let traceparent = (tracing && !tp.traceparent.is_empty()).then_some(tp.traceparent);
            Ok(Held {
                campaign,
                token,
                phase,
                lease,
                traceparent,
            })
        })
        .collect()
}

impl LaneSvc {
    /// Renews the tokens of one heartbeat, grouped by campaign.
    pub(super) async fn renew(
        &self,
        w: &Worker,
        items: Vec<pb::TokenPhase>,
    ) -> Result<Vec<pb::TokenRenewal>, Status> {
        let held = parse(items, otel::exporting())?;
        let mut by_campaign: BTreeMap<CampaignId, Vec<(Token, Phase)>> = BTreeMap::new();
        let mut traces: BTreeMap<AttemptTag, String> = BTreeMap::new();
        for h in held {
            match self.holds(w, &h.campaign, &h.token, &h.lease).await {
                Ok(()) => {}
                Err(e @ LeaseRefused::Denied { .. }) => {
                    return Err(Status::permission_denied(e.to_string()));
                }
                // The store is unreachable: say nothing about this batch.
                Err(LeaseRefused::Store(e)) => {
                    tracing::warn!(error = %e, "renew failed");
                    return Ok(Vec::new());
                }
            }
            if let Some(tp) = h.traceparent {
                traces.insert(AttemptTag::new(h.campaign.clone(), h.token.clone()), tp);
            }
            by_campaign
                .entry(h.campaign)
                .or_default()
                .push((h.token, h.phase));
        }
        let mut out = Vec::new();
        for (c, tokens) in by_campaign {
            out.extend(self.renew_campaign(&c, tokens, &traces).await);
        }
        Ok(out)
    }

    /// One campaign's renewals; a refusal is recorded in its attempt's trace.
    async fn renew_campaign(
        &self,
        c: &CampaignId,
        tokens: Vec<(Token, Phase)>,
        traces: &BTreeMap<AttemptTag, String>,
    ) -> Vec<pb::TokenRenewal> {
        let s = &self.shared;
        match s.store.renew(c, tokens.clone(), s.now()).await {
            Ok(states) => {
                for (t, st) in &states {
                    let said = match st {
                        RenewState::Lost => "lost",
                        RenewState::Cancel => "cancel",
                        RenewState::Renewed => continue,
                    };
                    let attempt = AttemptTag::new(c.clone(), t.clone());
                    if let Some(tp) = traces.get(&attempt) {
                        trace::renewal_refused(tp, &attempt, said);
                    }
                }
                states
                    .into_iter()
                    .map(|(t, st)| wire::renewal(c, &t, st))
                    .collect()
            }
            Err(StoreError::UnknownCampaign(_)) => tokens
                .iter()
                .map(|(t, _)| wire::renewal(c, t, RenewState::Lost))
                .collect(),
            // The store is unreachable: say nothing about these tokens.
            Err(e) => {
                tracing::warn!(campaign = %c, error = %e, "renew failed");
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(campaign: &str, trial: &str, phase: pb::Phase, traceparent: &str) -> pb::TokenPhase {
        pb::TokenPhase {
            token: Some(pb::Token {
                trial_id: trial.into(),
                attempt: 1,
                lease: "ab".into(),
            }),
            phase: phase as i32,
            campaign: campaign.into(),
            traceparent: traceparent.into(),
        }
    }

    #[test]
    fn a_heartbeat_is_parsed_whole_or_refused_naming_the_field() {
        let held = parse(
            vec![
                tp("c1", "t0.r0.a", pb::Phase::Agent, "00-aa-bb-01"),
                tp("c2", "t0.r0.a", pb::Phase::Boot, ""),
            ],
            true,
        )
        .unwrap();
        assert_eq!(held.len(), 2);
        assert_eq!(held[0].campaign.as_str(), "c1");
        assert_eq!(held[1].campaign.as_str(), "c2");
        assert_eq!(held[0].token, held[1].token, "campaigns share trial ids");
        assert_eq!(held[0].phase, Phase::Agent);
        assert_eq!(held[0].traceparent.as_deref(), Some("00-aa-bb-01"));
        assert_eq!(held[1].traceparent, None);
        // Without exported spans no traceparent is kept.
        let untraced = parse(
            vec![tp("c1", "t0.r0.a", pb::Phase::Agent, "00-aa-bb-01")],
            false,
        );
        assert_eq!(untraced.unwrap()[0].traceparent, None);
        let err = parse(
            vec![
                tp("c1", "t0.r0.a", pb::Phase::Agent, ""),
                tp("../c", "t0.r0.a", pb::Phase::Agent, ""),
            ],
            false,
        )
        .unwrap_err();
        assert!(err.message().contains("tokens[1].campaign"), "{err}");
    }
}
