//! `lanes report --format`: text, Markdown, LaTeX and JSON of one finished campaign carry the
//! same numbers, and `--json` stays the same as `--format json`.

mod support;

use support::{campaign, lanes_in};

fn stdout(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_report_format_carries_the_numbers_of_the_json() {
    let dir = tempfile::tempdir().unwrap();
    let file = campaign(dir.path(), "formats", 10, 0.001);
    stdout(lanes_in(dir.path()).arg("run").arg(&file).output().unwrap());
    let report = |args: &[&str]| {
        stdout(
            lanes_in(dir.path())
                .args(["report", "formats"])
                .args(args)
                .output()
                .unwrap(),
        )
    };
    let json: serde_json::Value = serde_json::from_str(&report(&["--format", "json"])).unwrap();
    let legacy: serde_json::Value = serde_json::from_str(&report(&["--json"])).unwrap();
    assert_eq!(json, legacy);

    let text = report(&[]);
    let markdown = report(&["--format", "markdown"]);
    let latex = report(&["--format", "latex"]);
    assert!(markdown.starts_with("# Campaign formats"), "{markdown}");
    assert!(latex.contains("\\begin{tabular}") && latex.contains("\\bottomrule"));
    for arm in json["arms"].as_array().unwrap() {
        let name = arm["arm"].as_str().unwrap();
        let (denom, counted, passed) = (&arm["denominator"], &arm["counted"], &arm["passed"]);
        let rate = format!("{:.3}", arm["pass_rate_counted"].as_f64().unwrap());
        let md = format!("| {name} | {denom} | {counted} | {passed} | {rate} |");
        assert!(markdown.contains(&md), "{md:?} not in\n{markdown}");
        let tex = format!("{name} & {denom} & {counted} & {passed} & {rate} &");
        assert!(latex.contains(&tex), "{tex:?} not in\n{latex}");
        let words: Vec<String> = [name.to_owned(), denom.to_string(), counted.to_string()]
            .into_iter()
            .chain([passed.to_string(), rate])
            .collect();
        assert!(
            text.lines().any(|l| l
                .split_whitespace()
                .take(5)
                .eq(words.iter().map(String::as_str))),
            "{words:?} not in\n{text}"
        );
    }

    let both = lanes_in(dir.path())
        .args(["report", "formats", "--json", "--format", "text"])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2));
}
