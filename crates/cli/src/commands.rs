//! The client commands' handlers: each parses nothing, calls one RPC and prints.

use std::path::PathBuf;

use tokio_stream::StreamExt;

use lanes_common::proto as pb;
use lanes_common::report::{Report, ReportFormat, Sections};

use crate::client::{Target, print_rows, report_status, status_json, status_text};
use crate::exit::Code;

#[derive(clap::Subcommand, Debug)]
pub(crate) enum ClientCmd {
    /// Submit a campaign file (a resume when its id exists).
    Submit {
        file: PathBuf,
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        smoke: crate::smoke::SmokeArgs,
    },
    /// A campaign's state, or every campaign's.
    Status {
        id: Option<String>,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Follow a campaign's events until it ends.
    Watch {
        id: String,
        #[command(flatten)]
        target: Target,
    },
    /// Stop a campaign: drain (in-flight attempts finish), or --cancel them.
    Stop {
        id: String,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        cancel: bool,
    },
    /// The ledger, one row per attempt.
    Results {
        id: String,
        #[command(flatten)]
        target: Target,
        #[arg(long, value_enum, default_value_t = ResultsFormat::Jsonl)]
        format: ResultsFormat,
        /// Keep printing new rows as they are written.
        #[arg(long)]
        follow: bool,
    },
    /// The report: completeness audit, per-arm rates, paired differences.
    Report {
        #[arg(required_unless_present = "from")]
        id: Option<String>,
        #[command(flatten)]
        target: Target,
        /// Read the campaign from an archive (`lanes archive`) instead of a coordinator.
        #[arg(long, value_name = "FILE", conflicts_with = "id")]
        from: Option<PathBuf>,
        /// How to print it: aligned text, Markdown tables, a LaTeX fragment (booktabs), or
        /// the report's JSON. Every format carries the same numbers.
        #[arg(long, value_enum, default_value_t = ReportFormatArg::Text)]
        format: ReportFormatArg,
        /// The same as --format json.
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// Print rates even though some trials are not final yet.
        #[arg(long)]
        partial: bool,
    },
    /// An operator retry pass: requeue the excluded trials (or those whose exclusion reason
    /// matches --reason) with fresh retry budgets. Recorded in the ledger with the note; the
    /// report shows those trials apart, per arm.
    Retry {
        id: String,
        #[command(flatten)]
        target: Target,
        /// Requeue excluded trials (required: counted and pending trials are never touched).
        #[arg(long, required = true)]
        excluded: bool,
        /// Only trials whose exclusion reason matches this glob, e.g. 'infra_failure:*'.
        #[arg(long, value_name = "PATTERN")]
        reason: Option<String>,
        /// Why: recorded in the ledger and the amendment.
        #[arg(long, value_name = "TEXT")]
        note: String,
    },
    /// Write a campaign's spec, amendments, tasks and whole ledger to one file (JSONL;
    /// gzip-compressed when FILE ends in .gz) that `lanes report --from FILE` reads.
    Archive {
        id: String,
        #[command(flatten)]
        target: Target,
        #[arg(long, value_name = "FILE")]
        to: PathBuf,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Delete a campaign and free its keys: spec, tasks, trial states and the whole ledger.
    /// Refused while it runs. Archive it first to keep its rows.
    Delete {
        id: String,
        #[command(flatten)]
        target: Target,
        /// Confirm: the delete cannot be undone.
        #[arg(long)]
        yes: bool,
    },
    /// A one-time link into the web dashboard: good once, for a few minutes, it logs a
    /// browser in without putting a token in a URL.
    UiLink {
        /// Open on this campaign's page [default: the campaign list].
        campaign: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// The workers connected to this coordinator replica, and their health.
    Workers {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ReportFormatArg {
    Text,
    Markdown,
    Latex,
    Json,
}

impl From<ReportFormatArg> for ReportFormat {
    fn from(f: ReportFormatArg) -> Self {
        match f {
            ReportFormatArg::Text => ReportFormat::Text,
            ReportFormatArg::Markdown => ReportFormat::Markdown,
            ReportFormatArg::Latex => ReportFormat::Latex,
            ReportFormatArg::Json => ReportFormat::Json,
        }
    }
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum ResultsFormat {
    Jsonl,
    Csv,
}

impl ClientCmd {
    fn target(&self) -> &Target {
        match self {
            ClientCmd::Submit { target, .. }
            | ClientCmd::Status { target, .. }
            | ClientCmd::Watch { target, .. }
            | ClientCmd::Stop { target, .. }
            | ClientCmd::Results { target, .. }
            | ClientCmd::Report { target, .. }
            | ClientCmd::Archive { target, .. }
            | ClientCmd::Retry { target, .. }
            | ClientCmd::Delete { target, .. }
            | ClientCmd::UiLink { target, .. }
            | ClientCmd::Workers { target, .. } => target,
        }
    }
}

pub(crate) fn run(cmd: ClientCmd) -> anyhow::Result<Code> {
    // An archive needs no coordinator.
    if let ClientCmd::Report {
        from: Some(path),
        format,
        json,
        partial,
        ..
    } = &cmd
    {
        let archive = match crate::archive::read(path) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("lanes: {e:#}");
                return Ok(Code::BadInput);
            }
        };
        let report = lanes_common::report::build(&archive.campaign, &archive.rows);
        let format = if *json {
            ReportFormatArg::Json
        } else {
            *format
        };
        return Ok(print_report(&report, format.into(), *partial));
    }
    let target = cmd.target().clone();
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let mut s = target.session().await?;
        let c = &mut s.client;
        let done: Result<Code, tonic::Status> = async {
            match cmd {
                ClientCmd::Submit { file, smoke, .. } => {
                    let campaign = match lanes_common::spec::load_file(&file) {
                        Ok(c) => c,
                        Err(e) => {
                            eprintln!("lanes: {e}");
                            return Ok(Code::BadInput);
                        }
                    };
                    let campaign = match smoke.apply(campaign) {
                        Ok(c) => c,
                        Err(e) => {
                            eprintln!("lanes: {e}");
                            return Ok(Code::BadInput);
                        }
                    };
                    // Task folders first: the coordinator refuses a campaign whose folders it lacks.
                    if let Err(e) = crate::bundles::send(c, &file, &campaign).await? {
                        eprintln!("lanes: {e}");
                        return Ok(Code::BadInput);
                    }
                    let req = pb::SubmitRequest::try_from(&campaign)
                        .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
                    let r = c.submit(req).await?.into_inner();
                    let what = if r.amended { "amended" } else if r.resumed { "resumed" } else { "submitted" };
                    println!("{} {what}: {} trials, {}", r.id, r.trials, r.spec_hash);
                    Ok(Code::Ok)
                }
                ClientCmd::Status { id, json, .. } => {
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
                ClientCmd::Watch { id, .. } => {
                    let mut events = c
                        .watch(pb::WatchRequest { id: id.clone(), from: String::new() })
                        .await?
                        .into_inner();
                    // On a terminal, the same live view as `lanes run`; otherwise event lines.
                    let mut view = std::io::IsTerminal::is_terminal(&std::io::stdout())
                        .then(|| crate::progress::View::new(8));
                    while let Some(e) = events.next().await {
                        use pb::watch_event::Event as E;
                        let e = e?;
                        if let Some(v) = view.as_mut() {
                            let st = c.get(pb::GetRequest { id: id.clone() }).await?.into_inner();
                            v.update(&st);
                            let ended = st.state == pb::CampaignState::Done as i32
                                || st.state == pb::CampaignState::Stopped as i32;
                            if ended {
                                if let Some(v) = view.take() {
                                    v.finish();
                                }
                                print!("{}", status_text(&st));
                                return Ok(Code::Ok);
                            }
                            continue;
                        }
                        match e.event {
                            Some(E::Snapshot(st)) => print!("{}", status_text(&st)),
                            Some(E::AttemptStarted(a)) => println!("started  {} on {}@{}", tok(&a.token), a.lane, a.host),
                            Some(E::AttemptPhase(a)) => println!("phase    {} {}", tok(&a.token), pb::Phase::try_from(a.phase).map(|p| p.as_str_name()).unwrap_or("?")),
                            Some(E::AttemptFinished(a)) => println!(
                                "finished {} {}{}",
                                tok(&a.token),
                                pb::Status::try_from(a.status).map(|s| s.as_str_name()).unwrap_or("?"),
                                if a.counted { " (counted)" } else { "" }
                            ),
                            Some(E::TrialFinal(t)) => println!("final    {}{}", t.trial_id, if t.excluded { format!(" excluded: {}", t.excluded_reason) } else { String::new() }),
                            Some(E::GatePaused(g)) => println!("gate     {:?}", g.gate),
                            Some(E::CampaignEnded(end)) => {
                                let state = pb::CampaignState::try_from(end.state).map(|s| s.as_str_name()).unwrap_or("?");
                                println!("campaign {state}");
                                if end.state == pb::CampaignState::Done as i32 || end.state == pb::CampaignState::Stopped as i32 {
                                    return Ok(Code::Ok);
                                }
                            }
                            None => {}
                        }
                    }
                    Ok(Code::Ok)
                }
                ClientCmd::Stop { id, cancel, .. } => {
                    let mode = if cancel { pb::StopMode::Cancel } else { pb::StopMode::Drain };
                    let r = c.stop(pb::StopRequest { id: id.clone(), mode: mode as i32 }).await?.into_inner();
                    println!("{id}: {}", crate::client::state_name(r.state));
                    Ok(Code::Ok)
                }
                ClientCmd::Results { id, format, follow, .. } => {
                    print_rows(c, &id, matches!(format, ResultsFormat::Csv), follow).await?;
                    Ok(Code::Ok)
                }
                ClientCmd::UiLink { campaign, .. } => {
                    let r = c
                        .login_link(pb::LoginLinkRequest { campaign: campaign.unwrap_or_default() })
                        .await?
                        .into_inner();
                    println!("{}", r.url);
                    eprintln!("good once, until {}", r.expires_utc);
                    Ok(Code::Ok)
                }
                ClientCmd::Workers { json, .. } => {
                    let workers = c.workers(pb::WorkersRequest {}).await?.into_inner().workers;
                    if json {
                        for w in &workers {
                            println!("{}", serde_json::json!({
                                "worker_id": w.worker_id, "host": w.host, "lanes": w.lanes,
                                "version": w.version, "connected_utc": w.connected_utc,
                                "outbox_broken": w.outbox_broken, "unpersisted": w.unpersisted,
                                "detail": w.detail,
                                "drivers": w.drivers, "campaign_commands": w.campaign_commands, "containers": w.containers,
                                "driver_override": w.driver_override, "campaigns": w.campaigns,
                                "refused": w.refused.iter().map(|r| serde_json::json!({"campaign": r.campaign, "reason": r.reason})).collect::<Vec<_>>(),
                            }));
                        }
                    } else {
                        print!("{}", workers_text(&workers));
                    }
                    Ok(Code::Ok)
                }
                ClientCmd::Archive { id, to, force, .. } => {
                    match crate::archive::write(c, &id, &to, force).await {
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
                ClientCmd::Retry {
                    id,
                    excluded,
                    reason,
                    note,
                    ..
                } => {
                    let r = c
                        .retry(pb::RetryRequest {
                            id: id.clone(),
                            excluded,
                            reason: reason.unwrap_or_default(),
                            note,
                        })
                        .await?
                        .into_inner();
                    if r.requeued == 0 {
                        println!("{id}: no excluded trial matches; nothing requeued");
                    } else {
                        let mut arms: Vec<String> =
                            r.by_arm.iter().map(|(a, n)| format!("{a} {n}")).collect();
                        arms.sort();
                        println!(
                            "{id}: retry pass {} requeued {} trials ({}); campaign {}",
                            r.pass,
                            r.requeued,
                            arms.join(", "),
                            crate::client::state_name(r.state)
                        );
                    }
                    Ok(Code::Ok)
                }
                ClientCmd::Delete { id, yes, .. } => {
                    if !yes {
                        let st = c.get(pb::GetRequest { id: id.clone() }).await?.into_inner();
                        eprintln!(
                            "lanes: this deletes campaign {id} ({}, {} trials, {} rows) for \
                             good. Keep its rows with `lanes archive {id} --to FILE` first; \
                             pass --yes to delete.",
                            crate::client::state_name(st.state),
                            st.trials_total,
                            st.rows_total
                        );
                        return Ok(Code::BadInput);
                    }
                    let r = c.delete(pb::DeleteRequest { id: id.clone() }).await?.into_inner();
                    println!("{id}: deleted ({} trials, {} rows)", r.trials, r.rows);
                    Ok(Code::Ok)
                }
                ClientCmd::Report {
                    id,
                    format,
                    json,
                    partial,
                    ..
                } => {
                    let id = id.unwrap_or_default();
                    let r = c.report(pb::ReportRequest { id }).await?.into_inner();
                    let report: Report = serde_json::from_str(&r.json)
                        .map_err(|e| tonic::Status::internal(format!("unreadable report: {e}")))?;
                    let format = if json { ReportFormatArg::Json } else { format };
                    Ok(print_report(&report, format.into(), partial))
                }
            }
        }
        .await;
        Ok(done.unwrap_or_else(|s| report_status(&s)))
    })
}

/// Prints `report` in `format`. While some trials are not final, a document format prints
/// the audit only (rates withheld, exit code 3) unless `partial`; JSON is always whole.
pub(crate) fn print_report(report: &Report, format: ReportFormat, partial: bool) -> Code {
    let pending = report.completeness.total.pending;
    if pending > 0 && !partial && format != ReportFormat::Json {
        print!("{}", report.render_as(format, Sections::Summary));
        eprintln!(
            "lanes: {pending} trials are not final yet: rates withheld (pass --partial to print them)"
        );
        return Code::Incomplete;
    }
    print!("{}", report.render_as(format, Sections::Full));
    Code::Ok
}

fn tok(t: &Option<pb::Token>) -> String {
    t.as_ref()
        .map(|t| format!("{}#a{}", t.trial_id, t.attempt))
        .unwrap_or_default()
}

/// One line per worker: who, how many lanes, since when, whether it takes work and what it
/// runs; then, indented, each running campaign it does not serve and why.
fn workers_text(workers: &[pb::WorkerInfo]) -> String {
    if workers.is_empty() {
        return "no workers connected to this replica\n".to_owned();
    }
    let mut out = format!(
        "{:<24} {:<24} {:>5}  {:<20}  {:<8}  RUNS\n",
        "WORKER", "HOST", "LANES", "CONNECTED", "HEALTH"
    );
    for w in workers {
        let health = if w.outbox_broken {
            format!("OUTBOX BROKEN: {}", w.detail)
        } else {
            "ok".to_owned()
        };
        out.push_str(&format!(
            "{:<24} {:<24} {:>5}  {:<20}  {health:<8}  {}\n",
            w.worker_id,
            w.host,
            w.lanes,
            w.connected_utc,
            runs(w)
        ));
        for r in &w.refused {
            out.push_str(&format!("  not serving {}: {}\n", r.campaign, r.reason));
        }
    }
    out
}

/// What a worker runs, in a few words: `sim`, its named drivers, campaign commands.
fn runs(w: &pb::WorkerInfo) -> String {
    if w.driver_override {
        return "--driver (every campaign)".to_owned();
    }
    let mut parts = vec!["sim".to_owned()];
    parts.extend(w.drivers.iter().cloned());
    if w.campaign_commands {
        parts.push("campaign commands".to_owned());
    }
    if w.containers {
        parts.push("containers".to_owned());
    }
    let mut text = parts.join(", ");
    if !w.campaigns.is_empty() {
        text.push_str(&format!(" (only {})", w.campaigns.join(", ")));
    }
    text
}
