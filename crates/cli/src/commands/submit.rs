//! `lanes submit FILE`: the campaign's task folders first, then the campaign.

use std::path::Path;

use lanes_common::proto as pb;

use super::Done;
use crate::client::Client;
use crate::exit::Code;

pub(super) async fn run(c: &mut Client, file: &Path, smoke: crate::smoke::SmokeArgs) -> Done {
    let campaign = match lanes_common::spec::load_file(file).map_err(|e| e.to_string()) {
        Ok(c) => match smoke.apply(c) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("lanes: {e}");
                return Ok(Code::BadInput);
            }
        },
        Err(e) => {
            eprintln!("lanes: {e}");
            return Ok(Code::BadInput);
        }
    };
    // Task folders first: the coordinator refuses a campaign whose folders it lacks.
    if let Err(e) = crate::bundles::send(c, file, &campaign).await? {
        eprintln!("lanes: {e}");
        return Ok(Code::BadInput);
    }
    let req = pb::SubmitRequest::try_from(&campaign)
        .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
    let r = c.submit(req).await?.into_inner();
    let what = if r.amended {
        "amended"
    } else if r.resumed {
        "resumed"
    } else {
        "submitted"
    };
    println!("{} {what}: {} trials, {}", r.id, r.trials, r.spec_hash);
    Ok(Code::Ok)
}
