//! Registration: a worker joins a session with its id, host, lanes, arms and offer (the
//! drivers, runtimes and campaign commands it runs). Refused when it speaks another lane
//! protocol, breaks a limit, or names another worker than its client certificate.

use std::sync::Arc;

use tonic::Status;

use lanes_common::convert::worker_offer;
use lanes_common::ids::{ArmId, HostName};
use lanes_common::limits::check_register;
use lanes_common::log_safe::LogSafe;
use lanes_common::proto as pb;

use super::lane::{LaneSvc, Worker};
use super::workers::describe_offer;
use crate::grpc_status::{bad_field, from_convert, from_limit};

impl LaneSvc {
    /// Checks a registration and joins the worker to the fleet's view; the caller sends the
    /// answer.
    pub(super) fn register(&self, r: pb::Register) -> Result<(Worker, pb::Registered), Status> {
        check_register(&r).map_err(from_limit)?;
        if let Err(e) = lanes_common::protocol::check_worker(r.protocol) {
            tracing::warn!(worker = %LogSafe(&r.worker_id), host = %LogSafe(&r.host), error = %e, "refused a worker of another lane protocol");
            return Err(Status::failed_precondition(e.to_string()));
        }
        if let Some(cn) = &self.identity
            && *cn != r.worker_id
        {
            tracing::warn!(worker = %LogSafe(&r.worker_id), certificate = %LogSafe(cn), host = %LogSafe(&r.host), "refused: the worker id is not the one its client certificate names");
            return Err(Status::permission_denied(format!(
                "worker id {:?} is not the subject of this session's client certificate ({cn:?})",
                r.worker_id
            )));
        }
        let arms = if r.arms.is_empty() {
            None
        } else {
            Some(
                r.arms
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        ArmId::new(a).map_err(|e| bad_field(&format!("register.arms[{i}]"), e))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            )
        };
        let host = HostName::new(&r.host).map_err(|e| bad_field("register.host", e))?;
        let offer = Arc::new(worker_offer(&r).map_err(from_convert)?);
        tracing::info!(worker = %LogSafe(&r.worker_id), host = %LogSafe(&r.host), lanes = r.lanes, drivers = ?offer.drivers.keys().collect::<Vec<_>>(), campaign_commands = offer.campaign_commands, "worker registered");
        let mut info = pb::WorkerInfo {
            worker_id: r.worker_id.clone(),
            host: r.host.clone(),
            lanes: r.lanes,
            version: r.version.chars().take(64).collect(),
            connected_utc: lanes_common::utc::format_rfc3339(self.shared.now()),
            ..Default::default()
        };
        describe_offer(&mut info, &offer);
        let member = self.shared.workers.join(info, offer.clone());
        let registered = pb::Registered {
            session: r.worker_id.clone(),
            protocol: lanes_common::protocol::LANE_PROTOCOL,
        };
        let joined = Worker {
            id: r.worker_id,
            host,
            arms,
            offer,
            member,
        };
        Ok((joined, registered))
    }
}
