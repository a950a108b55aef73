//! Store and conversion errors as gRPC statuses, in one place.

use prost::Message;
use tonic::{Code, Status};

use lanes_common::convert::ConvertError;
use lanes_common::limits::LimitError;
use lanes_common::proto as pb;
use lanes_common::resume::Refusal;
use lanes_common::submit::SubmitInvalid;
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

use crate::store::StoreError;

/// The status for a store error. A refused resume carries its conflicts in the details, as an
/// encoded `SubmitResponse`: the first of them, like the message (`Refusal`), so that both fit
/// the trailers a client accepts.
pub(crate) fn from_store(e: StoreError) -> Status {
    let message = e.to_string();
    match e {
        StoreError::UnknownCampaign(_) => Status::not_found(message),
        StoreError::UnknownToken(_) => Status::not_found(message),
        StoreError::StaleToken(_) => Status::failed_precondition(message),
        StoreError::ForeignToken(..) => Status::invalid_argument(message),
        StoreError::Refused(conflicts) => {
            let refusal = Refusal::new(conflicts);
            let message = refusal.to_string();
            let details = pb::SubmitResponse {
                conflicts: refusal.listed.into_iter().map(Into::into).collect(),
                ..Default::default()
            }
            .encode_to_vec();
            Status::with_details(Code::FailedPrecondition, message, details.into())
        }
        StoreError::InvalidOutcome(_) => Status::invalid_argument(message),
        StoreError::Active(..) => Status::failed_precondition(message),
        StoreError::NotDurable(_) | StoreError::Layout(_) => Status::failed_precondition(message),
        StoreError::Unavailable(_) => Status::unavailable(message),
        StoreError::Corrupt(_) => Status::data_loss(message),
        StoreError::Backend(_) => Status::internal(message),
    }
}

/// The status for a request field that does not validate.
pub(crate) fn from_convert(e: ConvertError) -> Status {
    Status::invalid_argument(e.to_string())
}

/// The status for a submission that does not validate: `INVALID_ARGUMENT`, every violation in
/// the message and as a `google.rpc.BadRequest` in the details.
pub(crate) fn from_submit(e: SubmitInvalid) -> Status {
    let violations: Vec<FieldViolation> = e
        .violations
        .iter()
        .map(|v| FieldViolation::new(&v.field, &v.description))
        .collect();
    Status::with_error_details(
        Code::InvalidArgument,
        e.to_string(),
        ErrorDetails::with_bad_request(violations),
    )
}

/// A request field that is not a valid id.
pub(crate) fn bad_field(field: &str, e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("invalid {field}: {e}"))
}

/// A request field over its size limit; the message names the field and the limit.
pub(crate) fn from_limit(e: LimitError) -> Status {
    Status::invalid_argument(e.to_string())
}
