//! The client commands: their arguments, and a dispatch to one module per command; each
//! handler parses nothing, calls its RPCs and prints.

mod archive;
mod artifacts;
mod delete;
mod report;
mod retry;
mod status;
mod stop;
mod submit;
mod ui_link;
mod watch;
mod workers;

use std::path::PathBuf;

use lanes_report::{Report, ReportFormat, Sections};

use crate::client::{Target, print_rows, report_status};
use crate::exit::Code;

/// What a command handler answers: an exit code, or the coordinator's refusal.
type Done = Result<Code, tonic::Status>;

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
    /// Delete a campaign and free its keys: spec, tasks, trial states and the whole ledger,
    /// and its objects in the coordinator's artifact store. Refused while it runs. Archive it
    /// first to keep its rows.
    Delete {
        id: String,
        #[command(flatten)]
        target: Target,
        /// Confirm: the delete cannot be undone.
        #[arg(long)]
        yes: bool,
        /// Leave the campaign's objects in the artifact store.
        #[arg(long)]
        keep_artifacts: bool,
    },
    /// Download an attempt's files from the artifact store, through the coordinator, each
    /// checked against the attempt's manifest (size and SHA-256).
    Artifacts {
        id: String,
        trial: String,
        /// The attempt [default: the trial's counted attempt, or else its latest].
        #[arg(long)]
        attempt: Option<u32>,
        /// The folder to write them to (made if missing); files keep their paths under it.
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
        #[command(flatten)]
        target: Target,
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
            | ClientCmd::Artifacts { target, .. }
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
        return Ok(report::from_archive(path, *format, *json, *partial));
    }
    let target = cmd.target().clone();
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let mut s = target.session().await?;
        let c = &mut s.client;
        let done = match cmd {
            ClientCmd::Submit { file, smoke, .. } => submit::run(c, &file, smoke).await,
            ClientCmd::Status { id, json, .. } => status::run(c, id, json).await,
            ClientCmd::Watch { id, .. } => watch::run(c, id).await,
            ClientCmd::Stop { id, cancel, .. } => stop::run(c, id, cancel).await,
            ClientCmd::Results {
                id, format, follow, ..
            } => print_rows(c, &id, matches!(format, ResultsFormat::Csv), follow)
                .await
                .map(|()| Code::Ok),
            ClientCmd::UiLink { campaign, .. } => ui_link::run(c, campaign).await,
            ClientCmd::Workers { json, .. } => workers::run(c, json).await,
            ClientCmd::Archive { id, to, force, .. } => archive::run(c, id, &to, force).await,
            ClientCmd::Retry {
                id,
                excluded,
                reason,
                note,
                ..
            } => retry::run(c, id, excluded, reason, note).await,
            ClientCmd::Delete {
                id,
                yes,
                keep_artifacts,
                ..
            } => delete::run(c, id, yes, keep_artifacts).await,
            ClientCmd::Artifacts {
                id,
                trial,
                attempt,
                to,
                ..
            } => artifacts::run(c, id, trial, attempt, &to).await,
            ClientCmd::Report {
                id,
                format,
                json,
                partial,
                ..
            } => report::run(c, id.unwrap_or_default(), format, json, partial).await,
        };
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
