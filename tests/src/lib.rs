//! Harness for the cross-crate tests in `tests/tests/`: the shipped config,
//! fixtures and state snapshots, and an in-memory deployment around them; a moto
//! server and an AWS deployment in it for the AWS tests.

pub mod aws;
pub mod emulator;
pub mod fault_run;
pub mod iam;
pub mod kube;
pub mod moto;
pub mod promql;
pub mod templates;
pub mod timeline;

use std::path::PathBuf;
use std::sync::Arc;

use ballast_core::config::Config;
use ballast_core::event::{parse_event, Event};
use ballast_core::ports::FixedClock;
use ballast_core::reconcile::Reconciler;
use ballast_core::snapshot::Snapshot;
use ballast_core::testing::{InMemory, World};
use chrono::{DateTime, Utc};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where the test script caches tools: `BALLAST_CACHE`, or `~/.cache/ballast`.
pub fn cache_dir() -> Option<PathBuf> {
    std::env::var_os("BALLAST_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/ballast")))
}

/// `program` on `PATH`.
pub fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| PathBuf::from(d).join(program)).find(|p| p.exists())
}

/// A loopback port nothing listens on now, for a server a test starts.
///
/// Not one the kernel picks for `bind(0)`: those come from the ephemeral range, which the
/// tests' own outgoing connections draw from too, so between this call and the server's
/// bind a client socket could take the port ("address already in use"). Ports below that
/// range are handed out in turn, never twice in one process, from a per-process offset.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let (low, high) = (10_000u32, ephemeral_range_start().saturating_sub(1).max(20_000));
    let span = high - low + 1;
    let offset = (u64::from(std::process::id()) * 7919 % u64::from(span)) as u32;
    let _ = NEXT.compare_exchange(u32::MAX, offset, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..span {
        let port = (low + NEXT.fetch_add(1, Ordering::SeqCst) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {low}..={high}")
}

fn ephemeral_range_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

pub fn example_config() -> Config {
    let text = std::fs::read_to_string(repo_root().join("ballast.example.yaml")).expect("example config");
    Config::from_yaml(&text).expect("example config is valid")
}

/// The example config with `dry_run` as given.
pub fn config_with_dry_run(dry_run: bool) -> Config {
    Config { dry_run, ..example_config() }
}

pub fn fixture(name: &str) -> Event {
    let bytes = std::fs::read(repo_root().join("events").join(name)).expect("fixture");
    parse_event(&bytes, Some(&example_config().origin())).expect("fixture parses")
}

pub fn state(name: &str) -> World {
    let text = std::fs::read_to_string(repo_root().join("events/states").join(name)).expect("state");
    World::from(Snapshot::from_json(&text).expect("state parses"))
}

pub type MemoryReconciler = Reconciler<InMemory, InMemory, InMemory, FixedClock>;

/// A deployment whose every port is the same in-memory world.
pub struct Deployment {
    pub memory: InMemory,
    pub clock: FixedClock,
    pub reconciler: MemoryReconciler,
}

impl Deployment {
    pub fn new(config: Config, world: World, now: DateTime<Utc>) -> Self {
        let memory = InMemory::new(world);
        let clock = FixedClock::new(now);
        let reconciler = Reconciler {
            config: Arc::new(config),
            autoscaling: memory.clone(),
            cluster: memory.clone(),
            store: memory.clone(),
            clock: clock.clone(),
            owner: "test".into(),
        };
        Deployment { memory, clock, reconciler }
    }

    pub fn desired(&self, asg: &str) -> u32 {
        self.memory.world().asg(asg).map(|a| a.desired).expect("asg exists")
    }
}

/// Whose turn the pool's lease is, through a state store's own calls (every store keeps
/// the same rule: the in-memory one and DynamoDB's conditions), from `t0`.
pub async fn assert_lease_turns<S: ballast_core::ports::StateStore>(store: &S, t0: DateTime<Utc>) {
    use ballast_core::ports::Urgency::{CanWait, CannotWait};
    let at = |s: i64| t0 + chrono::Duration::seconds(s);
    let ttl = std::time::Duration::from_secs(60);
    let take = |owner: &'static str, s: i64, urgency| store.acquire_lease("general", owner, at(s), ttl, urgency);
    let claim_for = ballast_core::ports::LEASE_CLAIM_FOR.num_seconds();
    assert!(take("a-drain", 0, CanWait).await.unwrap());
    assert!(!take("a-warning", 0, CannotWait).await.unwrap(), "held");
    assert!(take("a-drain", 1, CanWait).await.unwrap(), "the holder renews, whatever is claimed");
    store.release_lease("general", "a-drain").await.unwrap();
    assert!(
        !take("node-ready", 2, CanWait).await.unwrap(),
        "the warning claimed the next turn, and the renewal kept it"
    );
    assert!(take("a-warning", 2, CannotWait).await.unwrap(), "its turn");
    assert!(!take("node-ready", 3, CanWait).await.unwrap(), "held by the warning's run");
    store.release_lease("general", "a-warning").await.unwrap();
    assert!(
        !take("node-ready", 3, CanWait).await.unwrap(),
        "the claim lasts its 5 s: another warning may wait under it"
    );
    assert!(take("node-ready", claim_for + 1, CanWait).await.unwrap(), "then it lapses");
    store.release_lease("general", "node-ready").await.unwrap();

    // Two warnings wait (a reclaim wave): the first to take the lease leaves the turn
    // after it to the second, not to a run that can wait.
    let t = 20;
    assert!(take("a-tick", t, CanWait).await.unwrap());
    assert!(!take("warning-1", t, CannotWait).await.unwrap());
    assert!(!take("warning-2", t + 1, CannotWait).await.unwrap());
    store.release_lease("general", "a-tick").await.unwrap();
    assert!(take("warning-1", t + 1, CannotWait).await.unwrap());
    store.release_lease("general", "warning-1").await.unwrap();
    assert!(!take("node-ready", t + 2, CanWait).await.unwrap(), "warning-2 tried a second ago: the turn is its");
    assert!(take("warning-2", t + 2, CannotWait).await.unwrap());
    store.release_lease("general", "warning-2").await.unwrap();
    // An urgent run that stops trying (gave up, or died) holds others back only briefly.
    assert!(!take("node-ready", t + 3, CanWait).await.unwrap(), "claimed");
    let lapsed = t + 1 + claim_for + 1;
    assert!(take("node-ready", lapsed, CanWait).await.unwrap(), "the claim lapsed");
    // An expired lease is anyone's, and releasing another's lease does nothing.
    assert!(take("a-warning", lapsed + 61, CannotWait).await.unwrap(), "node-ready's expired");
    store.release_lease("general", "node-ready").await.unwrap();
    assert!(!take("node-ready", lapsed + 62, CanWait).await.unwrap(), "still a-warning's");
}
