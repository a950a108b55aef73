//! `campaign_toml`: the campaign-file loader on any text, as `lanes run` and `lanes submit`
//! read a file (`spec::load_str`) and as the coordinator reads a sent `campaign_toml`
//! (`spec::load_sent_str`). It must never panic, and a campaign it accepts must pass the rules
//! again and go through a submission unchanged (what `lanes submit` does with it).

use std::path::Path;

use lanes_common::spec::{self, Campaign};

/// Relative `[tasks] file` paths resolve under this folder, which does not exist: the loader
/// takes the path whatever it is, but no file is read.
const BASE: &str = "/nonexistent/lanes-fuzz";

pub fn fuzz_one(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((spec, inline)) = spec::load_sent_str(text, Path::new("campaign_toml")) {
        spec.validate()
            .expect("a loaded spec passes CampaignSpec::validate");
        if let Some(tasks) = inline {
            spec::validate_tasks(&tasks).expect("loaded tasks pass validate_tasks");
            super::submits_unchanged(&Campaign { spec, tasks });
        }
    }
    // An absolute `[tasks] file` would be read wherever it points (`/dev/stdin`, `/dev/zero`):
    // the user's own choice on the user's machine, but not one for a fuzzer to make.
    if names_an_absolute_tasks_file(text) {
        return;
    }
    if let Ok(c) = spec::load_str(text, Path::new("campaign.toml"), Path::new(BASE)) {
        c.spec.validate().expect("a loaded spec validates");
        spec::validate_tasks(&c.tasks).expect("loaded tasks validate");
        super::submits_unchanged(&c);
    }
}

fn names_an_absolute_tasks_file(text: &str) -> bool {
    let Ok(table) = toml::from_str::<toml::Table>(text) else {
        return false;
    };
    table
        .get("tasks")
        .and_then(|t| t.get("file"))
        .and_then(toml::Value::as_str)
        .is_some_and(|f| Path::new(f).is_absolute())
}
