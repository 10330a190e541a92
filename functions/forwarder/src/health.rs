//! `/healthz` (the loop is alive) and `/readyz` (both lists are in) for the kubelet's
//! probes, served by hyper on one port.

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

    fn answer(&self, path: &str, now_secs: i64) -> (StatusCode, &'static str) {
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

/// Binds `addr` and serves until the task is dropped.
pub async fn serve(addr: SocketAddr, health: Arc<Health>) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind(addr).await?;
    tracing::info!(%addr, "health endpoint listening");
    Ok(tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let health = health.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let (status, body) = health.answer(req.uri().path(), chrono::Utc::now().timestamp());
                    let response =
                        Response::builder().status(status).body(Full::new(Bytes::from_static(body.as_bytes())));
                    async move { Ok::<_, Infallible>(response.unwrap_or_default()) }
                });
                let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    }))
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
        assert_eq!(h.answer("/metrics", 1021).0, StatusCode::NOT_FOUND);
    }
}
