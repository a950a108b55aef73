//! `lanes bench`: the whole scheduling path under load, through the real gRPC coordinator and
//! a real store. It starts `lanes coordinator` as a child process (`coordinator_proc`),
//! submits one sim-driver campaign, and runs simulated lanes over real lane sessions
//! (`lanes`) until every trial is final, `--duration` ends or Ctrl-C. Then it measures a
//! ceiling on the same store (`ceiling`) and prints every figure (`report`), latencies as
//! percentiles (`stats`).

mod ceiling;
mod cleanup;
mod coordinator_proc;
mod lanes;
mod report;
mod stats;
mod walls;
mod workers;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinSet;

use lanes_common::proto as pb;
use lanes_dial::ClientTls;

use crate::exit::Code;
use crate::interrupt::Interrupt;
use coordinator_proc::{CoordinatorProc, StoreTarget};
use lanes::{LanePlan, LaneStats};
use report::{CoordinatorFigures, Ending, Report, StoreKind};
use workers::{WorkerFigures, WorkerPlan, WorkerProcs};

/// How long each ceiling runs.
const CEILING_RUN: Duration = Duration::from_secs(2);
/// The Redis ceiling uses one connection per lane, up to this many.
const MAX_CEILING_CONNECTIONS: u32 = 256;
/// How long lanes may take to finish the attempt in hand once told to stop.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// How often `--workers` asks the coordinator whether the campaign is done.
const POLL: Duration = Duration::from_millis(50);
/// The most `--workers` processes.
const MAX_WORKERS: u32 = 64;
/// How long a status, submit or stop call to the coordinator may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Prints a progress line to stderr (stdout carries only the report).
macro_rules! progress {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Bench against this Redis (e.g. redis://127.0.0.1:6390/): the coordinator stores its
    /// campaign there, and the ceiling runs there. Use a Redis no worker serves.
    #[arg(long, value_name = "URL", conflicts_with = "embedded")]
    redis: Option<String>,
    /// Bench the embedded store, in a temp directory (the default).
    #[arg(long)]
    embedded: bool,
    /// Let the coordinator use a Redis without `appendfsync always` (passed on to it).
    #[arg(long)]
    allow_lossy_store: bool,
    /// The coordinator answers a write only once N replicas confirmed it (passed on to it).
    #[arg(long, value_name = "N")]
    redis_wait: Option<u32>,
    #[command(flatten)]
    sentinel: crate::redis_args::SentinelArgs,
    /// Simulated lanes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    lanes: u32,
    /// Lanes per lane session (one session stands for one worker).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    lanes_per_session: u32,
    /// Run the lanes in this many real `lanes worker` processes (sharing --lanes) with the
    /// built-in sim driver, instead of simulated lanes: the whole path, end to end. Claim and
    /// renew latencies are then not measured.
    #[arg(long, value_name = "N", conflicts_with = "lanes_per_session",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_WORKERS)))]
    workers: Option<u32>,
    /// Trials of the bench campaign (one arm; --trials / --runs tasks).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    trials: u32,
    /// Runs per task: the campaign has --trials / --runs tasks, each run --runs times (so a
    /// large campaign of few tasks can be measured beside one of many). It must divide
    /// --trials.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    runs: u32,
    /// The longest the lanes run, in seconds (the report covers what finished).
    #[arg(long, value_name = "S", default_value = "10", value_parser = positive_seconds)]
    duration: Duration,
    /// Seconds each lane holds an assignment (an agent at work) before its outcome, while its
    /// session renews all its lanes' leases in one heartbeat every second, as a worker does.
    /// Lanes then start spread over this time (at most 10 s), as a fleet in its steady state.
    /// With --workers, the sim driver's agent takes this long. Default 0.
    #[arg(long, value_name = "S", default_value = "0", value_parser = agent_seconds)]
    agent_s: Duration,
    /// With --workers: the sim driver's settings, as the body of the campaign's `sim = { … }`
    /// table (e.g. 'boot_s = 0.2, agent_s = [3, 6], evaluate_s = 0.1'); replaces --agent-s.
    /// The report then gives the rows' admit walls and the campaign's ideal length.
    #[arg(long, value_name = "TABLE", requires = "workers")]
    sim: Option<String>,
    /// With --workers: put the workers' outboxes and artifacts in a new directory under this
    /// one and keep them, instead of in a temp directory removed at the end. Removing a run's
    /// tens of thousands of files slows the file creates of the runs that follow for minutes
    /// on some filesystems (ext4 without a journal checks every recently freed inode), so a
    /// series of runs keeps them until it is over (`scripts/bench-vs-celery.sh` does).
    #[arg(long, value_name = "DIR", requires = "workers")]
    work_dir: Option<std::path::PathBuf>,
    /// With --redis: leave the bench campaign in the store after the run (stopped, or done),
    /// instead of deleting it with its rows.
    #[arg(long)]
    keep_campaign: bool,
    /// The coordinator's runtime threads (its `--threads`) [default: its own default, one
    /// per CPU].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    coordinator_threads: Option<u16>,
    /// Print every figure as one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn positive_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if v.is_finite() && v > 0.0 && v <= 86_400.0 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err("must be more than 0 and at most 86400 seconds".into())
    }
}

fn agent_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if v.is_finite() && (0.0..=3_600.0).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err("must be from 0 to 3600 seconds".into())
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<Code> {
    if !args.trials.is_multiple_of(args.runs) {
        // A usage error, as clap reports its own (exit 2).
        clap::Error::raw(
            clap::error::ErrorKind::ValueValidation,
            format!(
                "--runs {} does not divide --trials {}\n",
                args.runs, args.trials
            ),
        )
        .exit();
    }
    crate::telemetry::init_logs(true);
    let sentinel = match args.sentinel.clone().options() {
        Ok(s) => s,
        Err(e) => {
            clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, format!("{e}\n")).exit()
        }
    };
    let redis = match (&args.redis, &sentinel) {
        (None, Some(_)) => Some(crate::redis_args::SENTINEL_URL.to_owned()),
        (url, _) => url.clone(),
    };
    if redis.is_some() && args.embedded {
        clap::Error::raw(
            clap::error::ErrorKind::ArgumentConflict,
            "--embedded and --redis-sentinel name two stores; give one\n",
        )
        .exit();
    }
    if redis.is_none() && (args.allow_lossy_store || args.redis_wait.is_some()) {
        clap::Error::raw(
            clap::error::ErrorKind::MissingRequiredArgument,
            "--allow-lossy-store and --redis-wait need --redis or --redis-sentinel\n",
        )
        .exit();
    }
    if redis.is_none() && args.keep_campaign {
        clap::Error::raw(
            clap::error::ErrorKind::MissingRequiredArgument,
            "--keep-campaign needs --redis or --redis-sentinel: the embedded store is a temp \
             directory removed after the run\n",
        )
        .exit();
    }
    let store = match redis {
        Some(url) => StoreTarget::Redis {
            url,
            allow_lossy: args.allow_lossy_store,
            wait: args.redis_wait,
            sentinel,
        },
        None => StoreTarget::Embedded,
    };
    // One thread: the simulated lanes stand for workers on other hosts, and a second thread
    // took more of the machine from the coordinator and its store than it gave the lanes
    // (on 2 cores, 1.00–1.12× the attempts/s with one; the ceiling's client did not lose).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let (report, code) = rt.block_on(bench(&args, store))?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    Ok(code)
}

/// The bench campaign: `trials / runs` tasks run `runs` times each, one arm, leases that
/// outlive the run; the sim driver's agent (for real workers) takes `agent`, the rest nothing.
fn submit_request(
    id: &str,
    trials: u32,
    runs: u32,
    agent: Duration,
    sim: Option<&str>,
) -> anyhow::Result<pb::SubmitRequest> {
    let n_tasks = trials / runs;
    let a = agent.as_secs_f64();
    let sim = sim.map_or_else(|| format!("agent_s = [{a:?}, {a:?}]"), str::to_owned);
    let text = format!(
        "id = \"{id}\"\nphase1_runs = {runs}\nschedule_seed = 1\npairing = \"none\"\nlease_ttl_s = 3600\n\
         [[arms]]\nid = \"a\"\n[driver]\nsim = {{ {sim} }}\n[tasks]\nfile = \"tasks.jsonl\"\n"
    );
    // The tasks go through a JSONL file, as a large campaign's do: a TOML array of a million
    // inline tables is far slower to parse than the store is to take it.
    let dir = tempfile::Builder::new()
        .prefix("lanes-bench-campaign-")
        .tempdir()
        .context("cannot create a temp directory")?;
    let mut tasks = String::with_capacity(n_tasks as usize * 16);
    for i in 0..n_tasks {
        tasks.push_str(&format!("{{\"id\": \"t{i}\"}}\n"));
    }
    std::fs::write(dir.path().join("tasks.jsonl"), tasks).context("cannot write the tasks")?;
    let c = lanes_common::spec::load_str(&text, &dir.path().join("bench.toml"), dir.path())
        .context("the bench campaign")?;
    Ok(pb::SubmitRequest::try_from(&c)?)
}

async fn call<T>(
    what: &str,
    f: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(s)) => anyhow::bail!("{what}: {}", lanes_dial::explain_status(&s)),
        Err(_) => anyhow::bail!("{what}: no answer within {CALL_TIMEOUT:?}"),
    }
}

async fn redis_memory(store: &StoreTarget) -> anyhow::Result<Option<u64>> {
    match store {
        StoreTarget::Redis { .. } => {
            let url = store.master_url().await?.unwrap_or_default();
            Ok(Some(ceiling::redis_used_memory(&url).await?))
        }
        StoreTarget::Embedded => Ok(None),
    }
}

/// Waits for every lane to end.
async fn join_all(set: &mut JoinSet<()>) {
    while set.join_next().await.is_some() {}
}

/// The coordinator with the bench campaign submitted to it.
struct Ready {
    coord: CoordinatorProc,
    client: crate::client::Client,
    campaign: String,
    submit_s: f64,
    mem_before: Option<u64>,
    mem_after: Option<u64>,
}

async fn setup(args: &Args, store: &StoreTarget) -> anyhow::Result<Ready> {
    let coord = CoordinatorProc::start(store, args.coordinator_threads).await?;
    progress!(
        "lanes bench: coordinator pid {} on {}",
        coord.pid(),
        coord.url
    );
    let mut client = crate::client::connect(
        &coord.url,
        Some(coord.client_token.clone()),
        &ClientTls::default(),
    )
    .await?;
    let campaign = format!("bench-{}", ceiling::random_hex()?);
    let request = submit_request(
        &campaign,
        args.trials,
        args.runs,
        args.agent_s,
        args.sim.as_deref(),
    )?;
    let mem_before = redis_memory(store).await?;
    let submitted = Instant::now();
    call("submit", client.submit(request))
        .await
        .with_context(|| format!("the coordinator's log:\n{}", coord.log_tail()))?;
    let submit_s = submitted.elapsed().as_secs_f64();
    let mem_after = redis_memory(store).await?;
    progress!(
        "lanes bench: campaign {campaign} of {} trials submitted in {submit_s:.2} s",
        args.trials
    );
    Ok(Ready {
        coord,
        client,
        campaign,
        submit_s,
        mem_before,
        mem_after,
    })
}

async fn bench(args: &Args, store: StoreTarget) -> anyhow::Result<(Report, Code)> {
    let mut interrupt = Interrupt::install()?;
    // Interrupted here, the setup is dropped, and with it the coordinator child.
    let Ready {
        mut coord,
        mut client,
        campaign,
        submit_s,
        mem_before,
        mem_after,
    } = tokio::select! {
        r = setup(args, &store) => r?,
        _ = interrupt.recv() => anyhow::bail!("interrupted before the lanes started"),
    };

    let run = match args.workers {
        None => drive_simulated(args, &coord, &campaign, &mut interrupt).await?,
        Some(n) => drive_workers(args, n, &coord, &mut client, &campaign, &mut interrupt).await?,
    };
    let Run {
        mut ending,
        elapsed,
        stats,
        sessions,
        workers,
        cpu_before,
    } = run;
    let log = |coord: &CoordinatorProc| format!("the coordinator's log:\n{}", coord.log_tail());
    let usage = coord.usage().with_context(|| log(&coord))?;

    let status = call(
        "status",
        client.get(pb::GetRequest {
            id: campaign.clone(),
        }),
    )
    .await
    .with_context(|| log(&coord))?;
    // Real workers' rows carry their walls: read before the coordinator goes.
    let walls = match workers {
        Some(_) => Some(
            walls::read(&mut client, &campaign, args.lanes)
                .await
                .with_context(|| log(&coord))?,
        ),
        None => None,
    };
    if status.state == pb::CampaignState::Done as i32 {
        ending = Ending::Done;
    } else {
        // A campaign left running in a shared store would be served to real workers.
        call(
            "stop",
            client.stop(pb::StopRequest {
                id: campaign.clone(),
                mode: pb::StopMode::Cancel as i32,
            }),
        )
        .await?;
        if ending == Ending::Done {
            ending = Ending::LanesFailed;
        }
    }
    let campaign_cleanup = match &store {
        StoreTarget::Redis { .. } if args.keep_campaign => Some(cleanup::Cleanup::Kept),
        StoreTarget::Redis { .. } => {
            let c = cleanup::delete(&mut client, &campaign).await;
            if let cleanup::Cleanup::Left(why) = &c {
                progress!("lanes bench: the campaign {campaign} stays in the store: {why}");
            }
            Some(c)
        }
        StoreTarget::Embedded => None,
    };
    coord.kill();

    let ceiling = match (&store, ending) {
        (_, Ending::Interrupted) => None,
        (StoreTarget::Redis { .. }, _) => {
            let url = &store.master_url().await?.unwrap_or_default();
            // Not cut short by an interrupt: its keys are deleted at its end.
            progress!("lanes bench: measuring the Redis ceiling for {CEILING_RUN:?}");
            let connections = args.lanes.min(MAX_CEILING_CONNECTIONS);
            Some(ceiling::redis(url, connections, CEILING_RUN).await?)
        }
        (StoreTarget::Embedded, _) => {
            progress!("lanes bench: measuring the redb ceiling for {CEILING_RUN:?}");
            tokio::select! {
                c = ceiling::redb(CEILING_RUN) => Some(c?),
                _ = interrupt.recv() => None,
            }
        }
    };
    let elapsed_s = elapsed.as_secs_f64();
    // Real workers report no per-attempt figures: every row the campaign has is an attempt.
    let attempts = match workers {
        Some(_) => status.rows_total,
        None => stats.attempts,
    };
    let report = Report {
        store: match store {
            StoreTarget::Embedded => StoreKind::Embedded,
            StoreTarget::Redis { .. } => StoreKind::Redis,
        },
        lanes: args.lanes,
        sessions,
        workers,
        trials: args.trials,
        campaign,
        ending,
        elapsed_s,
        submit_s,
        trials_final: status.trials_final,
        trials_counted: status.trials_counted,
        attempts,
        attempts_per_s: attempts as f64 / elapsed_s,
        no_work: stats.no_work,
        renew_lost: stats.renew_lost,
        outcome_errors: stats.outcome_errors,
        lane_errors: stats.errors,
        claim: stats.claims.summary(),
        renew: stats.renews.summary(),
        outcome_ack: stats.acks.summary(),
        walls,
        coordinator: CoordinatorFigures {
            threads: args.coordinator_threads,
            ..CoordinatorFigures::new(
                coord.pid(),
                usage.cpu.saturating_sub(cpu_before).as_secs_f64(),
                elapsed_s,
                usage.rss,
                usage.peak_rss,
            )
        },
        redis_memory_per_trial_bytes: match (mem_before, mem_after) {
            (Some(b), Some(a)) => Some((a as f64 - b as f64) / f64::from(args.trials)),
            _ => None,
        },
        campaign_cleanup,
        ceiling,
        ratio_to_ceiling_percent: None,
        summary: String::new(),
    }
    .finish();
    let code = match ending {
        Ending::Done | Ending::Duration => Code::Ok,
        Ending::Interrupted => Code::Stopped,
        Ending::LanesFailed => Code::Failure,
    };
    Ok((report, code))
}

/// How the lanes ran.
struct Run {
    ending: Ending,
    elapsed: Duration,
    stats: LaneStats,
    sessions: u32,
    workers: Option<WorkerFigures>,
    /// The coordinator's CPU time when the lanes started.
    cpu_before: Duration,
}

/// Simulated lanes over real lane sessions, in this process.
async fn drive_simulated(
    args: &Args,
    coord: &CoordinatorProc,
    campaign: &str,
    interrupt: &mut Interrupt,
) -> anyhow::Result<Run> {
    let plan = LanePlan {
        url: coord.url.clone(),
        lane_token: coord.lane_token.clone(),
        campaign: campaign.to_owned(),
        lanes: args.lanes,
        lanes_per_session: args.lanes_per_session,
        agent: args.agent_s,
    };
    let stats = Arc::new(Mutex::new(LaneStats::default()));
    let (stop, stop_rx) = watch::channel(false);
    let cpu_before = coord.usage()?.cpu;
    let start = Instant::now();
    let mut lanes = tokio::select! {
        r = lanes::start(&plan, stats.clone(), stop_rx) => r?,
        _ = interrupt.recv() => anyhow::bail!("interrupted before the lanes started"),
    };
    progress!(
        "lanes bench: {} lanes in {} sessions running (at most {:?})",
        plan.lanes,
        plan.sessions(),
        args.duration
    );
    let ending = tokio::select! {
        _ = join_all(&mut lanes) => Ending::Done,
        _ = tokio::time::sleep(args.duration) => Ending::Duration,
        _ = interrupt.recv() => Ending::Interrupted,
    };
    // Lanes finish the attempt in hand; a second interrupt, or the grace running out, ends
    // them where they are.
    let _ = stop.send(true);
    tokio::select! {
        _ = join_all(&mut lanes) => {}
        _ = tokio::time::sleep(STOP_GRACE) => {}
        _ = interrupt.recv() => {}
    }
    lanes.abort_all();
    join_all(&mut lanes).await;
    let elapsed = start.elapsed();
    let stats = std::mem::take(&mut *stats.lock().expect("stats"));
    Ok(Run {
        ending,
        elapsed,
        stats,
        sessions: plan.sessions(),
        workers: None,
        cpu_before,
    })
}

/// Real `lanes worker` processes, until the campaign is done, `--duration` ends or Ctrl-C.
async fn drive_workers(
    args: &Args,
    workers: u32,
    coord: &CoordinatorProc,
    client: &mut crate::client::Client,
    campaign: &str,
    interrupt: &mut Interrupt,
) -> anyhow::Result<Run> {
    let mut made = tempfile::Builder::new();
    made.prefix("lanes-bench-workers-");
    let dir = match &args.work_dir {
        Some(under) => made.tempdir_in(under),
        None => made.tempdir(),
    }
    .context("cannot create the workers' directory")?;
    let (dir, _removed) = match args.work_dir {
        Some(_) => (dir.keep(), None),
        None => (dir.path().to_owned(), Some(dir)),
    };
    let plan = WorkerPlan {
        url: &coord.url,
        lane_token_file: &coord.lane_token_file,
        workers,
        lanes: args.lanes,
        dir: &dir,
    };
    let cpu_before = coord.usage()?.cpu;
    let start = Instant::now();
    let mut procs = WorkerProcs::start(&plan)?;
    let before = procs.usage()?;
    progress!(
        "lanes bench: {} lanes in {workers} worker processes running (at most {:?})",
        args.lanes,
        args.duration
    );
    let deadline = tokio::time::sleep(args.duration);
    tokio::pin!(deadline);
    let ending = loop {
        tokio::select! {
            _ = &mut deadline => break Ending::Duration,
            _ = interrupt.recv() => break Ending::Interrupted,
            _ = tokio::time::sleep(POLL) => {}
        }
        let status = call(
            "status",
            client.get(pb::GetRequest {
                id: campaign.to_owned(),
            }),
        )
        .await?;
        if status.state == pb::CampaignState::Done as i32 {
            break Ending::Done;
        }
        // A worker that exits fails the bench, with its log.
        procs.usage()?;
    };
    let elapsed = start.elapsed();
    let after = procs.usage().with_context(|| procs.log_tails())?;
    let pids = procs.pids();
    procs.kill();
    Ok(Run {
        ending,
        elapsed,
        stats: LaneStats::default(),
        sessions: workers,
        workers: Some(WorkerFigures::new(pids, &before, &after, elapsed)),
        cpu_before,
    })
}
