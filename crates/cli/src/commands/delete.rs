//! `lanes delete ID --yes [--keep-artifacts]`: delete a campaign that runs nothing, and its
//! objects in the artifact store, for good.

use lanes_common::proto as pb;

use super::Done;
use crate::client::Client;
use crate::exit::Code;

pub(super) async fn run(c: &mut Client, id: String, yes: bool, keep_artifacts: bool) -> Done {
    if !yes {
        let st = c.get(pb::GetRequest { id: id.clone() }).await?.into_inner();
        eprintln!(
            "lanes: this deletes campaign {id} ({}, {} trials, {} rows) for good. Keep its \
             rows with `lanes archive {id} --to FILE` first; pass --yes to delete.",
            crate::client::state_name(st.state),
            st.trials_total,
            st.rows_total
        );
        return Ok(Code::BadInput);
    }
    let r = c
        .delete(pb::DeleteRequest {
            id: id.clone(),
            keep_artifacts,
        })
        .await?
        .into_inner();
    match r.artifacts {
        0 => println!("{id}: deleted ({} trials, {} rows)", r.trials, r.rows),
        n => println!(
            "{id}: deleted ({} trials, {} rows, {n} objects in the artifact store)",
            r.trials, r.rows
        ),
    }
    Ok(Code::Ok)
}
