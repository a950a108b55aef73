//! `lanes report ID` (from a coordinator) and `lanes report --from FILE` (from an archive).

use std::path::Path;

use lanes_common::proto as pb;
use lanes_report::Report;

use super::{Done, ReportFormatArg, print_report};
use crate::client::Client;
use crate::exit::Code;

pub(super) async fn run(
    c: &mut Client,
    id: String,
    format: ReportFormatArg,
    json: bool,
    partial: bool,
) -> Done {
    let r = c.report(pb::ReportRequest { id }).await?.into_inner();
    let report: Report = serde_json::from_str(&r.json)
        .map_err(|e| tonic::Status::internal(format!("unreadable report: {e}")))?;
    let format = if json { ReportFormatArg::Json } else { format };
    Ok(print_report(&report, format.into(), partial))
}

/// The report of an archived campaign: no coordinator needed.
pub(super) fn from_archive(
    path: &Path,
    format: ReportFormatArg,
    json: bool,
    partial: bool,
) -> Code {
    let archive = match crate::archive::read(path) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("lanes: {e:#}");
            return Code::BadInput;
        }
    };
    let report = lanes_report::build(&archive.campaign, &archive.rows);
    let format = if json { ReportFormatArg::Json } else { format };
    print_report(&report, format.into(), partial)
}
