//! The limits of lane messages: one check per message kind, run by the coordinator before it
//! converts or logs anything of the message, and [`fit_outcome`], which an honest lane applies
//! (through `Outcome::validate`) so that what it publishes always passes [`check_outcome`].

use super::*;
use crate::proto as pb;
use crate::row::Outcome;

/// `Register`: the worker id and host (1 to [`MAX_NAME_BYTES`]), version, labels and arms.
pub fn check_register(r: &pb::Register) -> Result<(), LimitError> {
    name(|| "register.worker_id".into(), &r.worker_id, MAX_NAME_BYTES)?;
    name(|| "register.host".into(), &r.host, MAX_NAME_BYTES)?;
    bytes(|| "register.version".into(), &r.version, MAX_VERSION_BYTES)?;
    items(|| "register.labels".into(), r.labels.len(), MAX_LABELS)?;
    for (k, v) in &r.labels {
        bytes(|| "register.labels (a key)".into(), k, MAX_LABEL_KEY_BYTES)?;
        bytes(
            || format!("register.labels[{k:?}]"),
            v,
            MAX_LABEL_VALUE_BYTES,
        )?;
    }
    items(|| "register.arms".into(), r.arms.len(), MAX_WORKER_ARMS)
}

/// `Release`: its free text, `detail`. (Its lane and campaign are checked as ids.)
pub fn check_release(r: &pb::Release) -> Result<(), LimitError> {
    bytes(|| "release.detail".into(), &r.detail, MAX_ERROR_BYTES)
}

/// `Outcome`: every free-text field and every list. (Its token and campaign are checked as
/// ids.)
pub fn check_outcome(o: &pb::Outcome) -> Result<(), LimitError> {
    let f = |n: &str| format!("outcome.{n}");
    bytes(|| f("lane"), &o.lane, MAX_NAME_BYTES)?;
    bytes(|| f("host"), &o.host, MAX_NAME_BYTES)?;
    bytes(|| f("worker"), &o.worker, MAX_NAME_BYTES)?;
    if let Some(d) = &o.driver {
        bytes(|| f("driver.name"), &d.name, MAX_DRIVER_NAME_BYTES)?;
        bytes(|| f("driver.version"), &d.version, MAX_DRIVER_NAME_BYTES)?;
        items(|| f("driver.pins"), d.pins.len(), MAX_PINS)?;
        for (k, v) in &d.pins {
            bytes(|| f("driver.pins (a key)"), k, MAX_PIN_KEY_BYTES)?;
            bytes(|| f(&format!("driver.pins[{k:?}]")), v, MAX_PIN_VALUE_BYTES)?;
        }
    }
    items(|| f("checks"), o.checks.len(), MAX_CHECKS)?;
    for (i, c) in o.checks.iter().enumerate() {
        bytes(
            || f(&format!("checks[{i}].name")),
            &c.name,
            MAX_CHECK_NAME_BYTES,
        )?;
        bytes(
            || f(&format!("checks[{i}].detail")),
            &c.detail,
            MAX_CHECK_DETAIL_BYTES,
        )?;
    }
    bytes(
        || f("runtime_outcome"),
        &o.runtime_outcome,
        MAX_RUNTIME_OUTCOME_BYTES,
    )?;
    bytes(|| f("final_text"), &o.final_text, MAX_FINAL_TEXT_BYTES)?;
    if let Some(q) = &o.quota {
        bytes(|| f("quota.provider"), &q.provider, MAX_PROVIDER_BYTES)?;
    }
    items(
        || f("publication_errors"),
        o.publication_errors.len(),
        MAX_PUBLICATION_ERRORS,
    )?;
    for (i, e) in o.publication_errors.iter().enumerate() {
        bytes(
            || f(&format!("publication_errors[{i}]")),
            e,
            MAX_PUBLICATION_ERROR_BYTES,
        )?;
    }
    items(|| f("artifacts"), o.artifacts.len(), MAX_ARTIFACTS)?;
    for (i, a) in o.artifacts.iter().enumerate() {
        bytes(|| f(&format!("artifacts[{i}]")), a, MAX_ARTIFACT_BYTES)?;
    }
    bytes(|| f("started_utc"), &o.started_utc, MAX_TIMESTAMP_BYTES)?;
    bytes(|| f("ended_utc"), &o.ended_utc, MAX_TIMESTAMP_BYTES)?;
    bytes(|| f("error"), &o.error, MAX_ERROR_BYTES)?;
    if let Some(g) = &o.gate {
        bytes(|| f("gate.reason"), &g.reason, MAX_ERROR_BYTES)?;
    }
    Ok(())
}

/// Cuts every free-text field of `o` to its limit and every list to its count, keeping the
/// first items, so an outcome a driver filled with too much text is still published (with its
/// score) rather than refused.
pub fn fit_outcome(o: &mut Outcome) {
    cut(&mut o.worker, MAX_NAME_BYTES);
    if let Some(d) = &mut o.driver {
        cut(&mut d.name, MAX_DRIVER_NAME_BYTES);
        cut(&mut d.version, MAX_DRIVER_NAME_BYTES);
        if d.pins.len() > MAX_PINS
            || d.pins
                .iter()
                .any(|(k, v)| k.len() > MAX_PIN_KEY_BYTES || v.len() > MAX_PIN_VALUE_BYTES)
        {
            d.pins = std::mem::take(&mut d.pins)
                .into_iter()
                .take(MAX_PINS)
                .map(|(mut k, mut v)| {
                    cut(&mut k, MAX_PIN_KEY_BYTES);
                    cut(&mut v, MAX_PIN_VALUE_BYTES);
                    (k, v)
                })
                .collect();
        }
    }
    o.result.checks.truncate(MAX_CHECKS);
    for c in &mut o.result.checks {
        cut(&mut c.name, MAX_CHECK_NAME_BYTES);
        cut(&mut c.detail, MAX_CHECK_DETAIL_BYTES);
    }
    for (text, limit) in [
        (&mut o.result.runtime_outcome, MAX_RUNTIME_OUTCOME_BYTES),
        (&mut o.result.final_text, MAX_FINAL_TEXT_BYTES),
        (&mut o.record.error, MAX_ERROR_BYTES),
    ] {
        if let Some(t) = text {
            cut(t, limit);
        }
    }
    if let Some(q) = &mut o.result.quota {
        cut(&mut q.provider, MAX_PROVIDER_BYTES);
    }
    o.record.publication_errors.truncate(MAX_PUBLICATION_ERRORS);
    for e in &mut o.record.publication_errors {
        cut(e, MAX_PUBLICATION_ERROR_BYTES);
    }
    o.record.artifacts.truncate(MAX_ARTIFACTS);
    for a in &mut o.record.artifacts {
        cut(a, MAX_ARTIFACT_BYTES);
    }
    if let Some(r) = o.result.gate.as_mut().and_then(|g| g.reason.as_mut()) {
        cut(r, MAX_ERROR_BYTES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{Token, TrialId};
    use crate::row::{Check, DriverIdentity, GateRecord, GateVerdict, QuotaReading, Status};

    fn outcome() -> pb::Outcome {
        let t = Token {
            trial_id: TrialId::new("t.r0.a").unwrap(),
            attempt: 1,
        };
        let mut o = Outcome::new(
            t,
            "w-0".parse().unwrap(),
            "h".parse().unwrap(),
            Status::Completed,
        );
        o.result.score = Some(1.0);
        pb::Outcome::from(o)
    }

    fn refused(o: &pb::Outcome) -> String {
        check_outcome(o).unwrap_err().to_string()
    }

    #[test]
    fn each_outcome_field_over_its_limit_is_named() {
        let big = |n: usize| "x".repeat(n + 1);
        type Break = Box<dyn Fn(&mut pb::Outcome)>;
        let cases: Vec<(&str, Break)> = vec![
            (
                "outcome.error is 16385 bytes",
                Box::new(move |o| o.error = big(MAX_ERROR_BYTES)),
            ),
            (
                "outcome.final_text is 65537 bytes",
                Box::new(move |o| o.final_text = big(MAX_FINAL_TEXT_BYTES)),
            ),
            (
                "outcome.runtime_outcome",
                Box::new(move |o| o.runtime_outcome = big(MAX_RUNTIME_OUTCOME_BYTES)),
            ),
            (
                "outcome.checks is 1025 items",
                Box::new(|o| o.checks = vec![pb::Check::default(); MAX_CHECKS + 1]),
            ),
            (
                "outcome.checks[0].detail",
                Box::new(move |o| {
                    o.checks = vec![pb::Check {
                        detail: big(MAX_CHECK_DETAIL_BYTES),
                        ..Default::default()
                    }]
                }),
            ),
            (
                "outcome.checks[0].name",
                Box::new(move |o| {
                    o.checks = vec![pb::Check {
                        name: big(MAX_CHECK_NAME_BYTES),
                        ..Default::default()
                    }]
                }),
            ),
            (
                "outcome.publication_errors[0]",
                Box::new(move |o| o.publication_errors = vec![big(MAX_PUBLICATION_ERROR_BYTES)]),
            ),
            (
                "outcome.publication_errors is 65 items",
                Box::new(|o| {
                    o.publication_errors = vec![String::new(); MAX_PUBLICATION_ERRORS + 1]
                }),
            ),
            (
                "outcome.artifacts[0]",
                Box::new(move |o| o.artifacts = vec![big(MAX_ARTIFACT_BYTES)]),
            ),
            (
                "outcome.driver.pins[\"k\"]",
                Box::new(move |o| {
                    o.driver = Some(pb::DriverIdentity {
                        pins: [("k".to_owned(), big(MAX_PIN_VALUE_BYTES))]
                            .into_iter()
                            .collect(),
                        ..Default::default()
                    })
                }),
            ),
            (
                "outcome.driver.pins is 65 items",
                Box::new(|o| {
                    o.driver = Some(pb::DriverIdentity {
                        pins: (0..=MAX_PINS)
                            .map(|i| (i.to_string(), String::new()))
                            .collect(),
                        ..Default::default()
                    })
                }),
            ),
            (
                "outcome.quota.provider",
                Box::new(move |o| {
                    o.quota = Some(pb::Quota {
                        provider: big(MAX_PROVIDER_BYTES),
                        ..Default::default()
                    })
                }),
            ),
            (
                "outcome.gate.reason",
                Box::new(move |o| {
                    o.gate = Some(pb::Gate {
                        reason: big(MAX_ERROR_BYTES),
                        ..Default::default()
                    })
                }),
            ),
            (
                "outcome.worker",
                Box::new(move |o| o.worker = big(MAX_NAME_BYTES)),
            ),
            (
                "outcome.started_utc",
                Box::new(move |o| o.started_utc = big(MAX_TIMESTAMP_BYTES)),
            ),
        ];
        assert!(check_outcome(&outcome()).is_ok());
        for (want, break_it) in cases {
            let mut o = outcome();
            break_it(&mut o);
            let e = refused(&o);
            assert!(e.starts_with(want), "{e:?} does not start with {want:?}");
            assert!(e.contains("over the limit of"), "{e}");
        }
    }

    #[test]
    fn register_and_release_limits() {
        let ok = pb::Register {
            worker_id: "w".into(),
            host: "h".into(),
            ..Default::default()
        };
        assert!(check_register(&ok).is_ok());
        for (want, r) in [
            (
                "register.worker_id is 0 bytes",
                pb::Register {
                    worker_id: String::new(),
                    ..ok.clone()
                },
            ),
            (
                "register.host is 257 bytes",
                pb::Register {
                    host: "h".repeat(257),
                    ..ok.clone()
                },
            ),
            (
                "register.labels is 65 items",
                pb::Register {
                    labels: (0..=MAX_LABELS)
                        .map(|i| (i.to_string(), String::new()))
                        .collect(),
                    ..ok.clone()
                },
            ),
            (
                "register.labels[\"k\"] is 1025 bytes",
                pb::Register {
                    labels: [("k".to_owned(), "v".repeat(1025))].into_iter().collect(),
                    ..ok.clone()
                },
            ),
            (
                "register.arms is 1025 items",
                pb::Register {
                    arms: vec!["a".into(); MAX_WORKER_ARMS + 1],
                    ..ok.clone()
                },
            ),
        ] {
            let e = check_register(&r).unwrap_err().to_string();
            assert!(e.starts_with(want), "{e:?} does not start with {want:?}");
        }
        let e = check_release(&pb::Release {
            detail: "d".repeat(MAX_ERROR_BYTES + 1),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.field, "release.detail");
        assert_eq!(e.limit, MAX_ERROR_BYTES);
    }

    #[test]
    fn a_fitted_outcome_passes_the_check() {
        let t = Token {
            trial_id: TrialId::new("t.r0.a").unwrap(),
            attempt: 1,
        };
        let mut o = Outcome::new(
            t,
            "l".repeat(256).parse().unwrap(),
            "h".parse().unwrap(),
            Status::Completed,
        );
        o.worker = "w".repeat(300);
        o.result.score = Some(1.0);
        o.record.error = Some("é".repeat(MAX_ERROR_BYTES));
        o.result.final_text = Some("x".repeat(MAX_FINAL_TEXT_BYTES * 2));
        o.result.runtime_outcome = Some("r".repeat(1000));
        o.result.checks = vec![
            Check {
                name: "n".repeat(1000),
                passed: true,
                score: None,
                detail: "d".repeat(10_000),
            };
            MAX_CHECKS + 5
        ];
        o.record.publication_errors = vec!["p".repeat(5000); 100];
        o.record.artifacts = vec!["a".repeat(2000); 2000];
        o.driver = Some(DriverIdentity {
            name: "n".repeat(300),
            version: "v".repeat(300),
            pins: (0..100)
                .map(|i| (format!("{i}{}", "k".repeat(300)), "v".repeat(2000)))
                .collect(),
        });
        o.result.quota = Some(QuotaReading {
            provider: "p".repeat(200),
            utilisation: 0.5,
            reset_epoch: None,
        });
        o.result.gate = Some(GateRecord {
            verdict: GateVerdict::Proceed,
            reason: Some("g".repeat(MAX_ERROR_BYTES + 1)),
            turns: 0,
            cost_usd: None,
        });
        fit_outcome(&mut o);
        assert_eq!(o.result.checks.len(), MAX_CHECKS);
        assert!(o.record.error.as_ref().unwrap().len() <= MAX_ERROR_BYTES);
        check_outcome(&pb::Outcome::from(o)).unwrap();
    }
}
