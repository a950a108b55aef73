//! `lanes archive ID --to FILE`: a campaign and its whole ledger, in one file.

use std::path::Path;

use super::Done;
use crate::client::Client;
use crate::exit::Code;

pub(super) async fn run(c: &mut Client, id: String, to: &Path, force: bool) -> Done {
    match crate::archive::write(c, &id, to, force).await {
        Ok(w) => {
            println!(
                "{id}: {} tasks and {} rows archived to {} (campaign {})",
                w.tasks,
                w.rows,
                to.display(),
                w.state
            );
            Ok(Code::Ok)
        }
        Err(e) => match e.downcast::<tonic::Status>() {
            Ok(status) => Err(status),
            Err(e) => {
                eprintln!("lanes: {e:#}");
                Ok(Code::Failure)
            }
        },
    }
}
