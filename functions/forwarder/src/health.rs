//! `/healthz` (the loop is alive) and `/readyz` (both lists are in) for the kubelet's
//! probes, and `/metrics` for Prometheus, served by hyper on one port.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// OpenMetrics text, which Prometheus negotiates and reads.
const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A tick older than this means the loop is stuck.
const STALE_AFTER_SECS: i64 = 30;

#[derive(Debug, Default)]
pub struct Health {
    last_tick: AtomicI64,
    synced: AtomicBool,
}

impl Health {
    pub fn tick(&self, now_secs: i64, synced: bool) {
        self.last_tick.store(now_secs, Ordering::Relaxed);
        self.synced.store(synced, Ordering::Relaxed);
    }

    pub fn answer(&self, path: &str, now_secs: i64) -> (StatusCode, &'static str) {
        let alive = now_secs - self.last_tick.load(Ordering::Relaxed) <= STALE_AFTER_SECS;
        match path {
            "/healthz" if alive => (StatusCode::OK, "ok\n"),
            "/healthz" => (StatusCode::SERVICE_UNAVAILABLE, "the watch loop has not ticked for 30s\n"),
            "/readyz" if alive && self.synced.load(Ordering::Relaxed) => (StatusCode::OK, "ok\n"),
            "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, "pods and nodes not listed yet\n"),
            _ => (StatusCode::NOT_FOUND, "not found\n"),
        }
    }
}

/// Binds `addr` and serves until the task is dropped; returns the address bound (the
/// port chosen when `addr`'s is 0).
pub async fn serve(
    addr: SocketAddr,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = match TcpListener::bind(addr).await {
        Ok(listener) => listener,
        // `[::]` (the default, for IPv6 clusters' probes; IPv4 too, dual-stack) on a node
        // with IPv6 disabled: IPv4 alone, rather than a pod that never starts.
        Err(e) if addr.ip() == std::net::Ipv6Addr::UNSPECIFIED => {
            tracing::warn!(addr = %addr, error = %e, "cannot listen on IPv6; listening on IPv4 only");
            TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, addr.port())).await?
        }
        Err(e) => return Err(e),
    };
    let bound = listener.local_addr()?;
    tracing::info!(addr = %bound, "health and metrics endpoint listening");
    Ok((
        bound,
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let health = health.clone();
                let metrics = metrics.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<Incoming>| {
                        let response = if req.uri().path() == "/metrics" {
                            Response::builder()
                                .header(hyper::header::CONTENT_TYPE, METRICS_CONTENT_TYPE)
                                .body(Full::new(Bytes::from(metrics.encode())))
                        } else {
                            let (status, body) = health.answer(req.uri().path(), chrono::Utc::now().timestamp());
                            Response::builder().status(status).body(Full::new(Bytes::from_static(body.as_bytes())))
                        };
                        async move { Ok::<_, Infallible>(response.unwrap_or_default()) }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_after_the_lists_and_alive_only_while_ticking() {
        let h = Health::default();
        h.tick(1000, false);
        assert_eq!(h.answer("/healthz", 1010).0, StatusCode::OK);
        assert_eq!(h.answer("/readyz", 1010).0, StatusCode::SERVICE_UNAVAILABLE);
        h.tick(1020, true);
        assert_eq!(h.answer("/readyz", 1021).0, StatusCode::OK);
        assert_eq!(h.answer("/healthz", 1100).0, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(h.answer("/other", 1021).0, StatusCode::NOT_FOUND);
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).await.unwrap();
        let mut page = String::new();
        stream.read_to_string(&mut page).await.unwrap();
        page
    }

    #[tokio::test]
    async fn metrics_are_served_beside_the_probes_on_the_address_given() {
        let (addr, server) =
            serve("127.0.0.1:0".parse().unwrap(), Arc::new(Health::default()), Arc::new(Metrics::new())).await.unwrap();
        assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
        let page = get(addr, "/metrics").await;
        assert!(page.starts_with("HTTP/1.0 200"), "{page}");
        assert!(page.contains("application/openmetrics-text"), "{page}");
        assert!(page.contains("ballast_forwarder_events_dropped_total 0"), "{page}");
        server.abort();
    }

    #[test]
    fn the_default_address_takes_ipv6_probes() {
        // An IPv6 EKS cluster's kubelet probes the pod's IPv6 address: `0.0.0.0` would
        // never answer it, and the pod would never be Ready.
        use clap::Parser;
        let settings = crate::settings::Settings::try_parse_from([
            "forwarder",
            "--event-bus",
            "b",
            "--config-parameter",
            "/ballast/c/config",
        ])
        .unwrap();
        assert_eq!(settings.health_addr, "[::]:8080".parse::<SocketAddr>().unwrap());
    }

    #[tokio::test]
    async fn probes_are_answered_over_ipv6() {
        // The loopback stands for the pod's address (tests listen on loopback only).
        let (addr, server) =
            serve("[::1]:0".parse().unwrap(), Arc::new(Health::default()), Arc::new(Metrics::new())).await.unwrap();
        assert!(addr.is_ipv6(), "{addr}");
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.0 "), "answered");
        server.abort();
    }
}
