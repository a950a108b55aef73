//! `lanes status [ID]`: one campaign's state, or every campaign's.

use lanes_common::proto as pb;

use super::Done;
use crate::client::{Client, status_json, status_text};
use crate::exit::Code;

pub(super) async fn run(c: &mut Client, id: Option<String>, json: bool) -> Done {
    let all = match id {
        Some(id) => vec![c.get(pb::GetRequest { id }).await?.into_inner()],
        None => c.list(pb::ListRequest {}).await?.into_inner().campaigns,
    };
    for st in &all {
        if json {
            println!("{}", status_json(st));
        } else {
            print!("{}", status_text(st));
        }
    }
    Ok(Code::Ok)
}
