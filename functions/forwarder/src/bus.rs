//! Where the events go: an EventBridge bus (PutEvents, at most 10 entries per call,
//! failed entries retried with backoff), or memory in tests.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use ballast_core::ports::{ErrorKind, PortError};

use crate::publisher::Outgoing;

/// PutEvents takes at most this many entries.
pub const MAX_ENTRIES: usize = 10;
const ATTEMPTS: u32 = 6;

#[async_trait]
pub trait EventBus: Send + Sync {
    /// Puts up to [`MAX_ENTRIES`]; returns, per entry, why it failed (None: accepted).
    async fn put(&self, events: &[Outgoing]) -> Result<Vec<Option<String>>, PortError>;
}

pub struct EventBridgeBus {
    client: aws_sdk_eventbridge::Client,
    bus: String,
    /// The config version in force (0: none), said in each demand event so that the
    /// functions note it for `ballast doctor`.
    config_version: Arc<AtomicI64>,
}

/// An event's detail as sent: a demand event says the config version the forwarder runs on.
pub fn detail_with_version(event: &Outgoing, config_version: i64) -> String {
    match event {
        Outgoing::PoolDemand(_) if config_version > 0 => {
            let mut detail = serde_json::to_value(event).unwrap_or_default();
            detail["config_version"] = config_version.into();
            detail.to_string()
        }
        _ => event.detail_json(),
    }
}

/// A PutEvents attempt that has not answered by then is abandoned and retried; a call, its
/// SDK retries included, gives up after [`CALL_TIMEOUT`]. Without them a hung connection
/// would hold the sender, and every later event, forever.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
pub const CALL_TIMEOUT: Duration = Duration::from_secs(15);

impl EventBridgeBus {
    pub fn new(sdk: &aws_config::SdkConfig, bus: impl Into<String>) -> EventBridgeBus {
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .operation_attempt_timeout(ATTEMPT_TIMEOUT)
            .operation_timeout(CALL_TIMEOUT)
            .build();
        let config = aws_sdk_eventbridge::config::Builder::from(sdk).timeout_config(timeouts).build();
        EventBridgeBus {
            client: aws_sdk_eventbridge::Client::from_conf(config),
            bus: bus.into(),
            config_version: Arc::default(),
        }
    }

    /// Demand events say the version `config_version` holds.
    pub fn with_config_version(mut self, config_version: Arc<AtomicI64>) -> Self {
        self.config_version = config_version;
        self
    }
}

#[async_trait]
impl EventBus for EventBridgeBus {
    async fn put(&self, events: &[Outgoing]) -> Result<Vec<Option<String>>, PortError> {
        let entries: Vec<PutEventsRequestEntry> = events
            .iter()
            .map(|e| {
                PutEventsRequestEntry::builder()
                    .event_bus_name(&self.bus)
                    .source(e.kind().source())
                    .detail_type(e.detail_type())
                    .detail(detail_with_version(e, self.config_version.load(Ordering::Relaxed)))
                    .build()
            })
            .collect();
        let out = self
            .client
            .put_events()
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| ballast_aws_errors::classify("PutEvents", e))?;
        let results = out.entries();
        Ok((0..events.len())
            .map(|i| match results.get(i) {
                Some(r) if r.error_code().is_some() => {
                    Some(format!("{}: {}", r.error_code().unwrap_or_default(), r.error_message().unwrap_or_default()))
                }
                Some(_) => None,
                None => Some("no result for this entry".to_string()),
            })
            .collect())
    }
}

/// Keeps every event, for tests.
#[derive(Clone, Default)]
pub struct MemoryBus {
    pub events: Arc<Mutex<Vec<Outgoing>>>,
}

#[async_trait]
impl EventBus for MemoryBus {
    async fn put(&self, events: &[Outgoing]) -> Result<Vec<Option<String>>, PortError> {
        self.events
            .lock()
            .map_err(|_| PortError::new(ErrorKind::Permanent, "put", "poisoned"))?
            .extend_from_slice(events);
        Ok(vec![None; events.len()])
    }
}

/// What became of a batch.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub sent: usize,
    pub dropped: usize,
    pub calls: usize,
    /// Entries EventBridge answered with an error code (each retry counts again).
    pub failed_entries: usize,
    /// Calls that failed as a whole.
    pub failed_calls: usize,
    /// Calls after the first of a chunk.
    pub retries: usize,
    /// Accepted events by detail-type, in the order first seen.
    pub sent_by_kind: Vec<(&'static str, usize)>,
}

impl Delivery {
    fn accepted(&mut self, event: &Outgoing) {
        self.sent += 1;
        let kind = event.detail_type();
        match self.sent_by_kind.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => self.sent_by_kind.push((kind, 1)),
        }
    }
}

/// Sends in chunks of ten; failed entries (and retryable call failures) are tried again
/// with exponential backoff. What still fails is dropped and logged: a later heartbeat
/// carries the demand again.
pub async fn deliver(bus: &dyn EventBus, events: Vec<Outgoing>, backoff: Duration) -> Delivery {
    let mut delivery = Delivery::default();
    for chunk in events.chunks(MAX_ENTRIES) {
        let mut pending: Vec<Outgoing> = chunk.to_vec();
        let mut wait = backoff;
        for attempt in 1..=ATTEMPTS {
            delivery.calls += 1;
            delivery.retries += usize::from(attempt > 1);
            match bus.put(&pending).await {
                Ok(results) => {
                    let mut failed: Vec<(Outgoing, String)> = Vec::new();
                    for (event, error) in pending.into_iter().zip(results) {
                        match error {
                            None => delivery.accepted(&event),
                            Some(e) => failed.push((event, e)),
                        }
                    }
                    delivery.failed_entries += failed.len();
                    if failed.is_empty() {
                        break;
                    }
                    tracing::warn!(attempt, failed = failed.len(), first_error = %failed[0].1, "PutEvents entries failed");
                    pending = failed.into_iter().map(|(e, _)| e).collect();
                }
                Err(e) if e.is_retryable() => {
                    delivery.failed_calls += 1;
                    tracing::warn!(attempt, error = %e, "PutEvents failed");
                }
                Err(e) => {
                    delivery.failed_calls += 1;
                    tracing::error!(error = %e, events = pending.len(), "PutEvents refused: events dropped");
                    delivery.dropped += pending.len();
                    break;
                }
            }
            if attempt == ATTEMPTS {
                tracing::error!(events = pending.len(), "PutEvents still failing: events dropped");
                delivery.dropped += pending.len();
                break;
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(10));
        }
    }
    delivery
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_core::event::PoolDemandDetail;

    /// Fails the first entry of every call until `failures` run out.
    struct Flaky {
        failures: Mutex<u32>,
        calls: Mutex<Vec<usize>>,
    }

    #[async_trait]
    impl EventBus for Flaky {
        async fn put(&self, events: &[Outgoing]) -> Result<Vec<Option<String>>, PortError> {
            self.calls.lock().unwrap().push(events.len());
            let mut failures = self.failures.lock().unwrap();
            Ok((0..events.len())
                .map(|i| {
                    (i == 0 && *failures > 0).then(|| {
                        *failures -= 1;
                        "ThrottlingException: slow down".to_string()
                    })
                })
                .collect())
        }
    }

    fn demand(i: u32) -> Outgoing {
        Outgoing::PoolDemand(PoolDemandDetail {
            shapes: Vec::new(),
            pool: "general".into(),
            cpu_millis: u64::from(i),
            memory_bytes: 0,
            pods: i,
            nodes: 1,
            observed_at: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        })
    }

    #[tokio::test]
    async fn at_most_ten_per_call_and_failed_entries_are_retried() {
        let bus = Flaky { failures: Mutex::new(2), calls: Mutex::new(Vec::new()) };
        let d = deliver(&bus, (0..23).map(demand).collect(), Duration::from_millis(1)).await;
        assert_eq!((d.sent, d.dropped, d.calls), (23, 0, 5));
        assert_eq!((d.failed_entries, d.failed_calls, d.retries), (2, 0, 2));
        assert_eq!(d.sent_by_kind, vec![("Pool Demand Changed", 23)]);
        // 10 (one fails), retry 1 (fails again), retry 1, then 10, then 3.
        assert_eq!(*bus.calls.lock().unwrap(), vec![10, 1, 1, 10, 3]);
    }

    #[tokio::test]
    async fn an_entry_that_never_goes_through_is_dropped_after_the_last_attempt() {
        let bus = Flaky { failures: Mutex::new(100), calls: Mutex::new(Vec::new()) };
        let d = deliver(&bus, vec![demand(1), demand(2)], Duration::from_millis(1)).await;
        assert_eq!((d.sent, d.dropped, d.calls), (1, 1, ATTEMPTS as usize));
        assert_eq!((d.failed_entries, d.retries), (ATTEMPTS as usize, ATTEMPTS as usize - 1));
    }
}
