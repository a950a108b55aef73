//! Parsing a 1M-task campaign: `cargo bench -p lanes-common --bench parse_tasks`.
//!
//! Prints wall times and, because this machine is noisy, the ratio against a baseline measured
//! in the same run: parsing every line into a bare `serde_json::Value`, the least any loader
//! must do.

use std::io::Write;
use std::time::Instant;

const TASKS: usize = 1_000_000;

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tasks = dir.path().join("tasks.jsonl");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tasks).unwrap());
        for i in 0..TASKS {
            writeln!(
                f,
                r#"{{"id":"task-{i:07}","group":"g{}","tags":["a","b"],"payload":{{"instruction":"do thing {i}","level":{},"files":["x","y"]}}}}"#,
                i % 17,
                i % 5
            )
            .unwrap();
        }
    }
    let campaign = dir.path().join("campaign.toml");
    std::fs::write(
        &campaign,
        "id = \"bench\"\nphase1_runs = 3\nschedule_seed = 1\n[[arms]]\nid = \"a\"\n[[arms]]\nid = \"b\"\n[tasks]\nfile = \"tasks.jsonl\"\n[driver]\nsim = {}\n",
    )
    .unwrap();

    let t = Instant::now();
    let text = std::fs::read_to_string(&tasks).unwrap();
    let mut n = 0usize;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        n += usize::from(v.is_object());
    }
    assert_eq!(n, TASKS);
    let baseline = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let c = lanes_common::spec::load_file(&campaign).expect("valid campaign");
    let load = t.elapsed().as_secs_f64();
    assert_eq!(c.tasks.len(), TASKS);

    let t = Instant::now();
    let hash = lanes_common::spec_hash::spec_hash(&c.spec, &c.tasks);
    let hash_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let trials = lanes_common::schedule::trials(&c).count();
    let schedule_s = t.elapsed().as_secs_f64();

    println!("tasks: {TASKS}, trials: {trials}, spec hash {hash}");
    println!("baseline  (serde_json::Value per line): {baseline:7.3} s");
    println!(
        "load_file (parse + validate + payload canonical + sha256): {load:7.3} s  = {:.2}x baseline",
        load / baseline
    );
    println!(
        "spec_hash: {hash_s:7.3} s  = {:.2}x baseline",
        hash_s / baseline
    );
    println!(
        "schedule ({trials} trials): {schedule_s:7.3} s  = {:.2}x baseline",
        schedule_s / baseline
    );
}
