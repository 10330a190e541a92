//! The forwarder's loop: two watchers (pods, nodes) feed the state; a one-second tick
//! asks the publisher what to say; a sender task delivers it. Stops on a signal after
//! delivering what was already decided.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ballast_core::config::Config;
use ballast_kube::pools::PoolMatcher;
use futures::StreamExt;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use tokio::sync::mpsc;

use crate::bus::{deliver, EventBus};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::publisher::{Outgoing, Publisher, Timing};
use crate::slim::{SlimNode, SlimPod};
use crate::state::{ClusterState, Kind};

pub struct Forwarder {
    pub client: kube::Client,
    pub bus: Arc<dyn EventBus>,
    pub state: ClusterState,
    /// Per pool: its wait target, if any (only then are its waits published).
    pub wait_targets: Vec<Option<Duration>>,
    pub timing: Timing,
    pub health: Arc<Health>,
    pub metrics: Arc<Metrics>,
    /// Objects per list call.
    pub page_size: u32,
    /// How often the publisher looks (tests use less than a second).
    pub tick: Duration,
    /// First wait before a failed PutEvents entry is tried again.
    pub retry_backoff: Duration,
    /// Batches waiting for the sender; when it is this far behind (EventBridge down or
    /// hanging), a tick's events are held back (`Publisher::unsent`) and the watch loop
    /// goes on.
    pub queue: usize,
}

/// What the run did, for logs and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct Summary {
    pub published: usize,
    pub dropped: usize,
    pub watch_errors: u64,
    /// Lists after the first (a 410 Gone or a lost watch makes the watcher list again).
    pub relists: u32,
}

fn apply<K, S>(
    state: &mut ClusterState,
    kind: Kind,
    event: Event<S>,
    full: fn(&S) -> &K,
    apply: fn(&mut ClusterState, &K),
    delete: fn(&mut ClusterState, &K),
) {
    match event {
        Event::Init => state.begin_list(kind),
        Event::InitApply(obj) | Event::Apply(obj) => apply(state, full(&obj)),
        Event::InitDone => state.end_list(kind),
        Event::Delete(obj) => delete(state, full(&obj)),
    }
}

impl Forwarder {
    /// A forwarder for `config`'s pools: a one-second tick, 200 ms first retry backoff.
    pub fn new(client: kube::Client, bus: Arc<dyn EventBus>, config: &Config, timing: Timing) -> Forwarder {
        let wait_targets: Vec<Option<Duration>> =
            config.pools.iter().map(|p| p.headroom.target.as_ref().map(|t| t.wait_p95.0)).collect();
        Forwarder {
            client,
            bus,
            state: ClusterState::new(PoolMatcher::new(&config.pools)).with_wait_targets(wait_targets.clone()),
            wait_targets,
            timing,
            health: Arc::new(Health::default()),
            metrics: Arc::new(Metrics::new()),
            page_size: 250,
            tick: Duration::from_secs(1),
            retry_backoff: Duration::from_millis(200),
            queue: 256,
        }
    }

    /// The state's gauges and relist counts into the metrics.
    fn observe(&self) {
        let (pod_relists, node_relists) = self.state.relists_by_kind();
        self.metrics.relisted(Kind::Pods, pod_relists);
        self.metrics.relisted(Kind::Nodes, node_relists);
        if !self.state.synced() {
            return;
        }
        let unschedulable: Vec<Option<u32>> =
            self.state.unschedulable().into_iter().map(|u| u.map(|u| u.count)).collect();
        let names = (0..self.state.pool_count()).map(|p| self.state.pool_name(p as u16));
        self.metrics.pools(
            names,
            &self.state.totals(),
            &unschedulable,
            (self.state.pod_records(), self.state.node_records()),
        );
    }

    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Summary {
        // Finished pods hold no capacity; the server leaves them out (and sends a delete
        // when a pod finishes). A bare watcher, no reflector store: the state keeps its own
        // compact records, and the objects (slim: only the fields read) are dropped at once.
        let pod_config =
            watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed").page_size(self.page_size);
        let mut pods = watcher::watcher(Api::<SlimPod>::all(self.client.clone()), pod_config).default_backoff().boxed();
        let node_config = watcher::Config::default().page_size(self.page_size);
        let mut nodes =
            watcher::watcher(Api::<SlimNode>::all(self.client.clone()), node_config).default_backoff().boxed();
        let (tx, mut rx) = mpsc::channel::<Vec<Outgoing>>(self.queue.max(1));
        let mut unsent = 0usize;
        let bus = self.bus.clone();
        let backoff = self.retry_backoff;
        let metrics = self.metrics.clone();
        let sender = tokio::spawn(async move {
            let mut summary = Summary::default();
            while let Some(events) = rx.recv().await {
                let delivery = deliver(bus.as_ref(), events, backoff).await;
                metrics.delivered(&delivery);
                summary.published += delivery.sent;
                summary.dropped += delivery.dropped;
            }
            summary
        });
        let mut publisher = Publisher::new(self.timing, self.state.pool_count())
            .waits_only_for(self.wait_targets.iter().map(Option::is_some).collect());
        let mut tick = tokio::time::interval(self.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watch_errors = 0u64;
        let mut was_synced = false;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                _ = tick.tick() => {
                    let now = chrono::Utc::now();
                    let waits = self.state.take_first_start_waits();
                    for start in &waits {
                        self.metrics.first_start(self.state.pool_name(start.pool), start.seconds);
                    }
                    publisher.waits_measured(&waits, now);
                    let out = publisher.tick(&mut self.state, now);
                    let synced = self.state.synced();
                    if synced && !was_synced {
                        tracing::info!(pods = self.state.pod_records(), nodes = self.state.node_records(), "pods and nodes listed");
                        was_synced = true;
                    }
                    if self.state.unreadable_pods > 0 {
                        tracing::warn!(pods = self.state.unreadable_pods, "pods with unreadable requests left out of demand");
                        self.state.unreadable_pods = 0;
                    }
                    self.health.tick(now.timestamp(), synced);
                    self.observe();
                    if !out.is_empty() {
                        // Never waits for the sender: a blocked loop would stop reading
                        // the watches and ticking the liveness probe, and the kubelet would
                        // restart the pod into a full relist, all for an EventBridge outage.
                        let described: Vec<(&'static str, String)> =
                            out.iter().map(|e| (e.detail_type(), e.detail_json())).collect();
                        match tx.try_send(out) {
                            // Logged once handed over (held-back ones would repeat each tick).
                            Ok(()) => {
                                for (detail_type, detail) in described {
                                    tracing::info!(detail_type, detail = %detail, "publishing");
                                }
                            }
                            Err(mpsc::error::TrySendError::Full(out)) => {
                                // Demand and unschedulable counts go again at the next tick,
                                // node changes are held (bounded): only waits windows are lost.
                                let lost = out.iter().filter(|e| matches!(e, Outgoing::PoolWaits(_))).count();
                                tracing::error!(events = out.len(), lost, "PutEvents far behind: events held back");
                                self.metrics.delivered(&crate::bus::Delivery { dropped: lost, ..Default::default() });
                                unsent += lost;
                                publisher.unsent(&mut self.state, out);
                            }
                            Err(mpsc::error::TrySendError::Closed(_)) => break,
                        }
                    }
                }
                Some(event) = pods.next() => match event {
                    Ok(event) => apply(&mut self.state, Kind::Pods, event, SlimPod::pod, ClusterState::apply_pod, ClusterState::delete_pod),
                    Err(e) => {
                        watch_errors += 1;
                        self.metrics.watch_error(Kind::Pods);
                        tracing::warn!(error = %e, "pod watch failed; relisting with backoff");
                    }
                },
                Some(event) = nodes.next() => match event {
                    Ok(event) => apply(&mut self.state, Kind::Nodes, event, SlimNode::node, ClusterState::apply_node, ClusterState::delete_node),
                    Err(e) => {
                        watch_errors += 1;
                        self.metrics.watch_error(Kind::Nodes);
                        tracing::warn!(error = %e, "node watch failed; relisting with backoff");
                    }
                },
            }
        }
        drop(tx);
        let mut summary = sender.await.unwrap_or_default();
        summary.dropped += unsent;
        summary.watch_errors = watch_errors;
        summary.relists = self.state.relists();
        tracing::info!(published = summary.published, dropped = summary.dropped, "forwarder stopped");
        summary
    }
}
