//! The coordinator's own request limits: the trial cap and the assignment size a campaign must
//! fit at submit, how many Submits run at once, and how many Watch/Rows streams one token may
//! hold open. A permit or a stream slot is an RAII guard: dropping it (the call or the stream
//! ended) frees it. (The size limits of fields are `lanes_common::limits`.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

use lanes_common::limits::check_assignments;
use lanes_common::schedule::trial_count;
use lanes_common::spec::Campaign;

use crate::auth::Caller;
use crate::server::CoordinatorConfig;

/// The limits of one replica, from its `CoordinatorConfig`.
#[derive(Debug)]
pub(crate) struct Limits {
    max_trials: u64,
    max_lane_message_bytes: usize,
    /// The largest client message, and the most a `SubmitStream` may carry in all.
    max_client_message_bytes: usize,
    max_submits: usize,
    submits: Arc<Semaphore>,
    streams: Arc<StreamSlots>,
}

impl Limits {
    pub(crate) fn of(config: &CoordinatorConfig) -> Self {
        Self {
            max_client_message_bytes: config.max_client_message_bytes,
            ..Self::new(
                config.max_trials,
                config.max_lane_message_bytes,
                config.max_concurrent_submits,
                config.max_streams_per_token,
            )
        }
    }

    pub(crate) fn max_client_message_bytes(&self) -> usize {
        self.max_client_message_bytes
    }

    pub(crate) fn new(
        max_trials: u64,
        max_lane_message_bytes: usize,
        max_submits: usize,
        max_streams_per_token: usize,
    ) -> Self {
        Self {
            max_trials,
            max_lane_message_bytes,
            max_client_message_bytes: CoordinatorConfig::default().max_client_message_bytes,
            max_submits,
            submits: Arc::new(Semaphore::new(max_submits)),
            streams: Arc::new(StreamSlots {
                max: max_streams_per_token,
                open: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A place among the Submits running at once, or `RESOURCE_EXHAUSTED`.
    pub(crate) fn submit_permit(&self) -> Result<OwnedSemaphorePermit, Status> {
        self.submits.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "{} submits are already running, the limit of this coordinator \
                 (--max-concurrent-submits); try again when one has finished",
                self.max_submits
            ))
        })
    }

    /// A slot for one more Watch or Rows stream of the caller's token, or `RESOURCE_EXHAUSTED`.
    /// Streams are counted per bearer token (by its digest: the token is never kept); callers
    /// without one share the slots of no token.
    pub(crate) fn stream_slot(&self, caller: Option<&Caller>) -> Result<StreamSlot, Status> {
        let key = caller
            .and_then(|c| c.token)
            .unwrap_or_else(|| Sha256::digest(b"").into());
        self.streams.acquire(key)
    }

    /// Refuses, before anything of it is stored, a campaign over the trial cap or whose largest
    /// assignment would not fit a lane message.
    pub(crate) fn check_campaign(&self, c: &Campaign) -> Result<(), Status> {
        let trials = trial_count(&c.spec, c.tasks.len());
        if trials > self.max_trials {
            return Err(Status::invalid_argument(format!(
                "tasks: the campaign has {trials} trials ({} tasks x {} runs x {} arms), over \
                 this coordinator's limit of {} trials (--max-trials)",
                c.tasks.len(),
                c.spec.total_runs(),
                c.spec.arms.len(),
                self.max_trials
            )));
        }
        check_assignments(c, self.max_lane_message_bytes)
            .map_err(|e| Status::invalid_argument(e.to_string()))
    }
}

/// Open streams per token digest.
#[derive(Debug)]
struct StreamSlots {
    max: usize,
    open: Mutex<HashMap<[u8; 32], usize>>,
}

impl StreamSlots {
    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], usize>> {
        // The map stays whole if a holder panicked: keep using it.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn acquire(self: &Arc<Self>, key: [u8; 32]) -> Result<StreamSlot, Status> {
        let mut open = self.open();
        let n = open.entry(key).or_default();
        if *n >= self.max {
            return Err(Status::resource_exhausted(format!(
                "this token already has {} Watch/Rows streams open, the limit of this \
                 coordinator (--max-streams-per-token); close one first",
                self.max
            )));
        }
        *n += 1;
        Ok(StreamSlot {
            slots: self.clone(),
            key,
        })
    }
}

/// One open stream of a token; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct StreamSlot {
    slots: Arc<StreamSlots>,
    key: [u8; 32],
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open();
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(token: &str) -> Option<Caller> {
        Some(Caller {
            role: crate::auth::Role::Client,
            token: Some(crate::auth::token_digest(token)),
        })
    }

    #[test]
    fn stream_slots_are_counted_per_token_and_freed_on_drop() {
        let limits = Limits::new(1, 4 << 20, 1, 2);
        let (a, b) = (caller("token-a"), caller("token-b"));
        let first = limits.stream_slot(a.as_ref()).unwrap();
        let _second = limits.stream_slot(a.as_ref()).unwrap();
        let refused = limits.stream_slot(a.as_ref()).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(!refused.message().contains("token-a"));
        // Another token has slots of its own.
        let _other = limits.stream_slot(b.as_ref()).unwrap();
        drop(first);
        let _again = limits.stream_slot(a.as_ref()).unwrap();
        assert!(limits.stream_slot(a.as_ref()).is_err());
        // Only digests are kept, and a token with no stream left is forgotten.
        drop(_other);
        assert_eq!(limits.streams.open().len(), 1);
    }

    /// A campaign with big payloads and configs, the widest ids, and a driver with every part.
    fn campaign(pairing: &str) -> Campaign {
        let arms: String = ["a", &"b".repeat(64), "c"]
            .iter()
            .enumerate()
            .map(|(i, id)| {
                format!(
                    "[[arms]]\nid = \"{id}\"\nconfig = {{ model = \"{}\", n = {i} }}\n",
                    "m".repeat(1000 * (i + 1))
                )
            })
            .collect();
        let tasks: String = (0..4)
            .map(|i| {
                format!(
                    "{{ id = \"{}{i}\", payload = {{ p = \"{}\" }} }},",
                    "t".repeat(127),
                    "x".repeat(3000 * i)
                )
            })
            .collect();
        let text = format!(
            "id = \"{}\"\nphase1_runs = 9999\nphase2_runs = 1\nschedule_seed = 1\n\
             pairing = \"{pairing}\"\ngate = true\n{arms}\
             [tasks]\nitems = [{tasks}]\n\
             [driver]\nsim = {{ infeasible_tasks = [\"x\"] }}\nsecret_payload_keys = [\"k\"]\n\
             env = {{ A = \"$B\" }}\n[driver.expect]\nv = \"1\"\n",
            "c".repeat(63)
        );
        lanes_common::spec::load_str(
            &text,
            std::path::Path::new("x.toml"),
            std::path::Path::new("."),
        )
        .unwrap()
    }

    /// The biggest assignment the coordinator really encodes, for this campaign: every trial
    /// of the last run of each task (or one trial), every number at its widest, the longest lane
    /// name.
    fn encoded_largest(c: &Campaign) -> usize {
        use crate::store::{AssignedTrial, Assignment, UnitDriver};
        use lanes_common::ids::Token;
        use lanes_common::spec::Pairing;
        use prost::Message;
        let per_unit = match c.spec.pairing {
            Pairing::Group => c.spec.arms.len(),
            Pairing::None => 1,
        };
        let last_run = c.spec.total_runs() - 1;
        let trials: Vec<_> = lanes_common::schedule::trials(c)
            .filter(|t| t.run_index == last_run)
            .collect();
        let mut largest = 0;
        // Every window of `per_unit` trials of one task, so `None` tries each arm alone.
        for group in trials.chunks(c.spec.arms.len()) {
            for unit in group.windows(per_unit) {
                let a = Assignment {
                    campaign: c.spec.id.clone(),
                    paired: true,
                    lease_ttl_ms: u64::MAX,
                    driver: UnitDriver::of(&c.spec),
                    trials: unit
                        .iter()
                        .map(|t| {
                            let task = c.tasks.iter().find(|k| k.id == t.task).unwrap();
                            let mut trial = t.clone();
                            trial.order_index = u64::MAX;
                            trial.seed = u64::MAX;
                            trial.arm_slot = u32::MAX;
                            trial.timeout_s = u32::MAX;
                            trial.max_turns = u32::MAX;
                            trial.max_cost_usd = Some(1.0);
                            AssignedTrial {
                                token: Token {
                                    trial_id: t.trial_id.clone(),
                                    attempt: u32::MAX,
                                },
                                payload_json: task.payload.json().to_owned(),
                                arm_config: c.spec.arm(&t.arm).unwrap().config.clone(),
                                hard_deadline_in_ms: u64::MAX,
                                trial,
                            }
                        })
                        .collect(),
                };
                let lane = "l".repeat(256);
                largest = largest.max(crate::wire::assignment(a, &lane).encoded_len());
            }
        }
        largest
    }

    #[test]
    fn the_assignment_bound_is_never_below_the_real_encoding() {
        for pairing in ["group", "none"] {
            let c = campaign(pairing);
            let real = encoded_largest(&c);
            let (index, bound, trials) = lanes_common::limits::largest_assignment(&c).unwrap();
            assert_eq!(index, 3, "{pairing}: the task with the largest payload");
            assert_eq!(trials, if pairing == "group" { 3 } else { 1 });
            assert!(bound >= real, "{pairing}: bound {bound} < encoded {real}");
            // And close enough to mean something.
            assert!(
                bound <= real + 1024 * trials,
                "{pairing}: bound {bound}, encoded {real}"
            );
        }
    }

    #[test]
    fn a_campaign_over_the_trial_cap_or_the_lane_message_limit_is_refused() {
        let c = campaign("group");
        let trials = lanes_common::schedule::trial_count(&c.spec, c.tasks.len());
        assert!(
            Limits::new(trials, 4 << 20, 1, 1)
                .check_campaign(&c)
                .is_ok()
        );
        let e = Limits::new(trials - 1, 4 << 20, 1, 1)
            .check_campaign(&c)
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("--max-trials"), "{}", e.message());
        let e = Limits::new(trials, 16 * 1024, 1, 1)
            .check_campaign(&c)
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        let task3 = format!("task \"{}3\"", "t".repeat(127));
        assert!(e.message().contains(&task3), "{}", e.message());
        assert!(
            e.message().contains("max_lane_message_bytes = 16384"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn submit_permits_are_freed_on_drop() {
        let limits = Limits::new(1, 4 << 20, 2, 1);
        let p1 = limits.submit_permit().unwrap();
        let _p2 = limits.submit_permit().unwrap();
        let e = limits.submit_permit().unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(
            e.message().contains("--max-concurrent-submits"),
            "{}",
            e.message()
        );
        drop(p1);
        assert!(limits.submit_permit().is_ok());
    }
}
