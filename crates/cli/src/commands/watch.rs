//! `lanes watch ID`: a campaign's events until it ends; on a terminal, the live view of
//! `lanes run` instead.

use tokio_stream::StreamExt;

use lanes_common::proto as pb;

use super::Done;
use crate::client::{Client, status_text};
use crate::exit::Code;

fn ended(state: i32) -> bool {
    state == pb::CampaignState::Done as i32 || state == pb::CampaignState::Stopped as i32
}

pub(super) async fn run(c: &mut Client, id: String) -> Done {
    let mut events = c
        .watch(pb::WatchRequest {
            id: id.clone(),
            from: String::new(),
        })
        .await?
        .into_inner();
    let mut view =
        std::io::IsTerminal::is_terminal(&std::io::stdout()).then(|| crate::progress::View::new(8));
    while let Some(e) = events.next().await {
        let e = e?;
        if let Some(v) = view.as_mut() {
            let st = c.get(pb::GetRequest { id: id.clone() }).await?.into_inner();
            v.update(&st);
            if ended(st.state) {
                if let Some(v) = view.take() {
                    v.finish();
                }
                print!("{}", status_text(&st));
                return Ok(Code::Ok);
            }
            continue;
        }
        if e.event.is_some_and(print_event) {
            return Ok(Code::Ok);
        }
    }
    Ok(Code::Ok)
}

/// Prints one event as a line; answers whether the campaign has ended.
fn print_event(event: pb::watch_event::Event) -> bool {
    use pb::watch_event::Event as E;
    match event {
        // A campaign that ended before the watch began sends no more events.
        E::Snapshot(st) => {
            print!("{}", status_text(&st));
            return ended(st.state);
        }
        E::AttemptStarted(a) => println!("started  {} on {}@{}", tok(&a.token), a.lane, a.host),
        E::AttemptPhase(a) => println!(
            "phase    {} {}",
            tok(&a.token),
            pb::Phase::try_from(a.phase).map_or("?", |p| p.as_str_name())
        ),
        E::AttemptFinished(a) => println!(
            "finished {} {}{}",
            tok(&a.token),
            pb::Status::try_from(a.status).map_or("?", |s| s.as_str_name()),
            if a.counted { " (counted)" } else { "" }
        ),
        E::TrialFinal(t) => println!(
            "final    {}{}",
            t.trial_id,
            if t.excluded {
                format!(" excluded: {}", t.excluded_reason)
            } else {
                String::new()
            }
        ),
        E::GatePaused(g) => println!("gate     {:?}", g.gate),
        E::CampaignEnded(end) => {
            let state = pb::CampaignState::try_from(end.state).map_or("?", |s| s.as_str_name());
            println!("campaign {state}");
            return ended(end.state);
        }
    }
    false
}

fn tok(t: &Option<pb::Token>) -> String {
    t.as_ref()
        .map(|t| format!("{}#a{}", t.trial_id, t.attempt))
        .unwrap_or_default()
}
