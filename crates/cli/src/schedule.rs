//! `lanes schedule`: prints the pre-registered schedule, then a summary line with the trial
//! count and the spec hash.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use lanes_common::schedule::{self, Trial};
use lanes_common::spec;
use lanes_common::spec_hash::spec_hash;

use crate::exit::Code;

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum Format {
    Jsonl,
    Table,
}

pub(crate) fn run(file: &Path, format: Format) -> anyhow::Result<Code> {
    let campaign = match spec::load_file(file) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lanes: {e}");
            return Ok(Code::BadInput);
        }
    };
    let hash = spec_hash(&campaign.spec, &campaign.tasks);
    let total = schedule::trial_count(&campaign.spec, campaign.tasks.len());
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let written = (|| -> io::Result<()> {
        if let Format::Table = format {
            writeln!(
                out,
                "{:>8} {:<40} {:>5} {:>3} {:>4} {:<16} {:<16} {:>20} {:>7} {:>5}",
                "order",
                "trial_id",
                "phase",
                "run",
                "slot",
                "arm",
                "first_arm",
                "seed",
                "timeout",
                "turns"
            )?;
        }
        for trial in schedule::trials(&campaign) {
            match format {
                Format::Jsonl => {
                    serde_json::to_writer(&mut out, &trial)?;
                    out.write_all(b"\n")?;
                }
                Format::Table => table_row(&mut out, &trial)?,
            }
        }
        let summary = serde_json::json!({
            "summary": true,
            "campaign": campaign.spec.id,
            "trials": total,
            "tasks": campaign.tasks.len(),
            "arms": campaign.spec.arms.len(),
            "run_groups": total / campaign.spec.arms.len() as u64,
            "spec_hash": hash,
        });
        match format {
            Format::Jsonl => writeln!(out, "{summary}")?,
            Format::Table => writeln!(
                out,
                "{total} trials ({} tasks x {} runs x {} arms), spec_hash {hash}",
                campaign.tasks.len(),
                campaign.spec.total_runs(),
                campaign.spec.arms.len()
            )?,
        }
        out.flush()
    })();
    match written {
        Ok(()) => Ok(Code::Ok),
        // `lanes schedule ... | head` is a normal use.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(Code::Ok),
        Err(e) => Err(e.into()),
    }
}

fn table_row(out: &mut impl Write, t: &Trial) -> io::Result<()> {
    writeln!(
        out,
        "{:>8} {:<40} {:>5} {:>3} {:>4} {:<16} {:<16} {:>20} {:>7} {:>5}",
        t.order_index,
        t.trial_id.as_str(),
        t.phase,
        t.run_index,
        t.arm_slot,
        t.arm.as_str(),
        t.first_arm.as_str(),
        t.seed,
        t.timeout_s,
        t.max_turns
    )
}
