//! The rendering's sections: the summary is exactly the text before the per-arm table.

use std::path::Path;

use super::{Sections, build};
use lanes_common::row::{Row, Status, StoreFields};
use lanes_common::schedule;
use lanes_common::spec;

fn campaign() -> spec::Campaign {
    let text = "id = \"rep\"\nphase1_runs = 2\nschedule_seed = 7\n\
                [[arms]]\nid = \"a\"\n[[arms]]\nid = \"b\"\n\
                [tasks]\nitems = [{ id = \"t1\" }, { id = \"t2\" }]\n[driver]\nsim = {}\n";
    spec::load_str(text, Path::new("x.toml"), Path::new(".")).unwrap()
}

/// One counted row per trial for the first `n` trials of the schedule; the rest stay pending.
fn rows(campaign: &spec::Campaign, n: usize) -> Vec<Row> {
    schedule::trials(campaign)
        .take(n)
        .enumerate()
        .map(|(i, trial)| {
            let store = StoreFields {
                seq: i as u64,
                spec_hash: "h1".to_owned(),
                is_final: true,
                counted: true,
                written_utc: "2026-01-01T00:00:00Z".parse().unwrap(),
                ..StoreFields::default()
            };
            let mut row = Row::bare(&campaign.spec.id, &trial, 1, Status::Completed, None, store);
            row.result.passed = Some(i % 2 == 0);
            row
        })
        .collect()
}

#[test]
fn the_summary_is_the_full_text_up_to_the_per_arm_table() {
    let c = campaign();
    for n in [0, 3, 8] {
        let report = build(&c, &rows(&c, n));
        let full = report.render(Sections::Full);
        let summary = report.render(Sections::Summary);
        assert_eq!(full, report.to_text());
        // What `lanes report` used to print by cutting the full text at the heading.
        assert_eq!(
            Some(summary.as_str()),
            full.split("PER ARM").next(),
            "n = {n}"
        );
        assert!(full.starts_with(&summary));
        assert!(full[summary.len()..].starts_with("PER ARM"));
        assert!(summary.contains("COMPLETENESS"));
        assert!(!summary.contains("PER ARM") && !summary.contains("PAIRED"));
    }
}
