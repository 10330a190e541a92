//! The config followed while a function is warm. Its home is one SSM parameter: a new
//! version is read on the parameter's own change event and otherwise at most
//! [`CHECK_EVERY`] after it was written, so going live or back to dry run takes seconds,
//! not a redeploy. A version that fails validation leaves the function on the last good
//! one (an error and a `ConfigRefused` metric), never down.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ballast_core::config::Config;
use ballast_core::event::EventKind;
use ballast_core::ports::{ConfigHome, ConfigText, PortError};
use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::time::Instant;
use tracing::{error, info, warn};

use crate::app::StartError;

/// How often a warm function asks whether its config changed when no change event came.
pub const CHECK_EVERY: Duration = Duration::from_secs(60);
/// The longest a look may take (read, parse, connect) before the event goes on with the
/// version in force: it runs on the event's path.
pub const LOOK_WITHIN: Duration = Duration::from_secs(10);
/// How often a function with no usable config yet looks again.
pub const RETRY_UNUSABLE_EVERY: Duration = Duration::from_secs(10);
/// How many earlier versions a cold start on a refused one judges (Parameter Store keeps
/// 100): a few bad versions in a row are a rare mistake; a long run of them, a broken
/// writer not worth a slow start.
pub const LOOK_BACK_AT_MOST: usize = 20;

/// A config that never changes: `BALLAST_CONFIG` or `BALLAST_CONFIG_FILE`, read once.
pub struct FixedHome {
    pub text: String,
    pub what: String,
}

#[async_trait]
impl ConfigHome for FixedHome {
    async fn read(&self) -> Result<ConfigText, PortError> {
        Ok(ConfigText { text: self.text.clone(), version: None })
    }
    fn describe(&self) -> String {
        self.what.clone()
    }
    fn changes(&self) -> bool {
        false
    }
}

/// Builds what runs on one config version (the app and its adapters).
pub type Build<T> = Box<dyn Fn(Config) -> BoxFuture<'static, Result<T, StartError>> + Send + Sync>;

/// Why a function has no config to run on.
#[derive(Debug, Clone, thiserror::Error)]
#[error("no usable config in {home} yet: {why}")]
pub struct NoConfig {
    pub home: String,
    pub why: String,
}

struct State<T> {
    current: Option<(Arc<T>, Option<i64>)>,
    checked: Option<Instant>,
    /// The last version refused, so that it is judged (and reported) once.
    refused: Option<i64>,
    /// The versions before `refused` were all judged, none good: not read again for it.
    history_judged: bool,
}

/// The config (and what is built on it) in force, followed as its home changes.
pub struct Live<T> {
    home: Box<dyn ConfigHome>,
    build: Build<T>,
    state: tokio::sync::Mutex<State<T>>,
    function: &'static str,
    metrics: fn(&Value),
}

impl<T> Live<T> {
    pub fn new(function: &'static str, home: Box<dyn ConfigHome>, build: Build<T>, metrics: fn(&Value)) -> Self {
        Live {
            home,
            build,
            state: tokio::sync::Mutex::new(State {
                current: None,
                checked: None,
                refused: None,
                history_judged: false,
            }),
            function,
            metrics,
        }
    }

    /// What is in force and its version, read again from the home when `changed` (its
    /// change event came) or when the last look is [`CHECK_EVERY`] old.
    pub async fn current(&self, changed: bool) -> Result<(Arc<T>, Option<i64>), NoConfig> {
        let mut state = self.state.lock().await;
        let due = match (&state.current, state.checked) {
            (None, Some(at)) => changed || at.elapsed() >= RETRY_UNUSABLE_EVERY,
            (None, None) => true,
            (Some(_), _) if !self.home.changes() => false,
            (Some(_), Some(at)) => changed || at.elapsed() >= CHECK_EVERY,
            (Some(_), None) => true,
        };
        if due && tokio::time::timeout(LOOK_WITHIN, self.look(&mut state)).await.is_err() {
            warn!(function = self.function, home = %self.home.describe(), "the config look took over {LOOK_WITHIN:?}; staying on the version in force");
        }
        match &state.current {
            Some((app, version)) => Ok((Arc::clone(app), *version)),
            None => Err(NoConfig { home: self.home.describe(), why: self.unusable_why(&state) }),
        }
    }

    fn unusable_why(&self, state: &State<T>) -> String {
        match state.refused {
            Some(v) if state.history_judged => {
                format!("version {v} was refused and no earlier version is good (see the errors logged)")
            }
            Some(v) => format!("version {v} was refused (see the error logged with it)"),
            None => "it could not be read (see the error logged)".into(),
        }
    }

    async fn look(&self, state: &mut State<T>) {
        state.checked = Some(Instant::now());
        let home = self.home.describe();
        let in_force = state.current.as_ref().and_then(|(_, v)| *v);
        let read = match self.home.read().await {
            Ok(read) => read,
            Err(e) => {
                match in_force {
                    Some(v) => {
                        warn!(function = self.function, home = %home, error = %e, config_version = v, "cannot read the config; staying on the version in force")
                    }
                    None => error!(function = self.function, home = %home, error = %e, "cannot read the config"),
                }
                return;
            }
        };
        if state.current.is_some() && read.version == in_force {
            return;
        }
        if read.version.is_some() && read.version == state.refused {
            self.fall_back(state).await;
            return;
        }
        match self.judge(&read).await {
            Ok(app) => {
                info!(function = self.function, home = %home, config_version = ?read.version, previous_version = ?in_force, "config in force");
                state.current = Some((Arc::new(app), read.version));
                state.refused = None;
                state.history_judged = false;
            }
            Err(Verdict::Refused(why)) | Err(Verdict::Unstartable(_, why)) => {
                state.refused = read.version;
                state.history_judged = false;
                let version = read.version.map_or("(unversioned)".to_string(), |v| v.to_string());
                match in_force {
                    Some(v) => {
                        error!(function = self.function, home = %home, refused_version = %version, config_version = v, error = %why, "config refused; looking for a good version between it and the one in force")
                    }
                    None => {
                        error!(function = self.function, home = %home, refused_version = %version, error = %why, "config refused; looking for the newest good version before it")
                    }
                }
                (self.metrics)(&crate::metrics::emf_count(
                    self.function,
                    "ConfigRefused",
                    chrono::Utc::now().timestamp_millis(),
                ));
                self.fall_back(state).await;
            }
            Err(Verdict::NotYet(e)) => match in_force {
                Some(v) => {
                    warn!(function = self.function, config_version = ?read.version, in_force = v, error = %e, "cannot start on the new config yet; staying on the version in force")
                }
                None => {
                    error!(function = self.function, config_version = ?read.version, error = %e, "cannot start on the config")
                }
            },
        }
    }

    /// Whether a version can be run on: it parses, and what is built on it starts.
    async fn judge(&self, read: &ConfigText) -> Result<T, Verdict> {
        if read.text.trim().is_empty() {
            return Err(Verdict::Refused(
                "it is empty: write the config with `ballast config push ballast.yaml`".into(),
            ));
        }
        let config = Config::from_yaml(&read.text).map_err(|e| Verdict::Refused(e.to_string()))?;
        match (self.build)(config).await {
            Ok(app) => Ok(app),
            // A config this function can never run on (another region, a cluster that does
            // not exist or may not be described) is refused; one whose start failed for a
            // passing reason (DescribeCluster throttled) is tried again at the next look.
            Err(e) if e.is_permanent() => {
                let why = e.to_string();
                Err(Verdict::Unstartable(e, why))
            }
            Err(e) => Err(Verdict::NotYet(e)),
        }
    }

    /// A refused latest version leaves the function on the newest good version before it:
    /// a cold start finds one in the history, and so does a warm function when one newer
    /// than its own was written in between (else warm and cold functions would run
    /// different versions, one live and one dry). Until a good version is pushed.
    async fn fall_back(&self, state: &mut State<T>) {
        let Some(refused) = state.refused else { return };
        if state.history_judged {
            return;
        }
        let home = self.home.describe();
        let in_force = state.current.as_ref().and_then(|(_, v)| *v);
        let earlier = match self.home.earlier(refused, LOOK_BACK_AT_MOST).await {
            Ok(earlier) => earlier,
            Err(e) => {
                // Said once: the next look tries again only for another version.
                state.history_judged = true;
                error!(function = self.function, home = %home, refused_version = refused, error = %e, "cannot read the config's earlier versions");
                return;
            }
        };
        let newer_than_in_force = |v: &ConfigText| in_force.is_none_or(|f| v.version.is_some_and(|n| n > f));
        for older in earlier.into_iter().take_while(newer_than_in_force) {
            match self.judge(&older).await {
                Ok(app) => {
                    warn!(function = self.function, home = %home, config_version = ?older.version, refused_version = refused, previous_version = ?in_force, "running on the newest good config version before the refused one, until a good version is written");
                    state.current = Some((Arc::new(app), older.version));
                    state.history_judged = true;
                    return;
                }
                // A version of its own that cannot be run on (it does not parse, or names
                // another region): the one before it may.
                Err(Verdict::Refused(why)) | Err(Verdict::Unstartable(StartError::Region { .. }, why)) => {
                    info!(function = self.function, home = %home, config_version = ?older.version, error = %why, "earlier config version refused too");
                }
                // What fails whatever the version (access to the cluster): judged again at
                // the next look, from the newest.
                Err(Verdict::Unstartable(e, _)) | Err(Verdict::NotYet(e)) => {
                    warn!(function = self.function, home = %home, config_version = ?older.version, error = %e, "cannot start on an earlier config version yet");
                    return;
                }
            }
        }
        state.history_judged = true;
        if in_force.is_none() {
            error!(function = self.function, home = %home, refused_version = refused, "no earlier config version is good either: write a good one with `ballast config push`");
        }
    }
}

enum Verdict {
    /// Never to be run on (reported once per version): it does not parse.
    Refused(String),
    /// It parses, but starting on it fails for good (another region, a cluster that
    /// cannot be described); said as the second field.
    Unstartable(StartError, String),
    /// Not now: tried again at the next look.
    NotYet(StartError),
}

/// Whether an event (an EventBridge envelope) is Parameter Store's news of a change to a
/// parameter. The functions accept it whichever parameter it names (a rule selects theirs).
pub fn is_config_change(event: &Value) -> bool {
    let kind = EventKind::ParameterStoreChange;
    event.get("source").and_then(Value::as_str) == Some(kind.source())
        && event.get("detail-type").and_then(Value::as_str) == Some(kind.detail_type())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_core::ports::ErrorKind;
    use std::sync::Mutex;

    const GOOD: &str = ballast_core::testing::MINIMAL_CONFIG;

    /// A parameter: its latest version (or why it cannot be read), how often it was read,
    /// its history and how often that was read.
    struct Shelf(Mutex<Result<ConfigText, String>>, Mutex<u32>, Mutex<Vec<ConfigText>>, Mutex<u32>);

    impl Shelf {
        fn put(&self, text: &str, version: i64) {
            let put = ConfigText { text: text.into(), version: Some(version) };
            self.2.lock().unwrap().push(put.clone());
            *self.0.lock().unwrap() = Ok(put);
        }
    }

    struct ShelfHome(Arc<Shelf>);

    #[async_trait]
    impl ConfigHome for ShelfHome {
        async fn read(&self) -> Result<ConfigText, PortError> {
            *self.0 .1.lock().unwrap() += 1;
            self.0 .0.lock().unwrap().clone().map_err(|e| PortError::new(ErrorKind::Permanent, "GetParameter", e))
        }
        fn describe(&self) -> String {
            "SSM parameter /ballast/c/config".into()
        }
        fn changes(&self) -> bool {
            true
        }
        async fn earlier(&self, before: i64, at_most: usize) -> Result<Vec<ConfigText>, PortError> {
            *self.0 .3.lock().unwrap() += 1;
            Ok(ballast_core::ports::newest_before(self.0 .2.lock().unwrap().clone(), before, at_most))
        }
    }

    fn live(shelf: &Arc<Shelf>) -> Live<Config> {
        let build: Build<Config> = Box::new(|config| Box::pin(async move { Ok(config) }));
        Live::new("schedule", Box::new(ShelfHome(Arc::clone(shelf))), build, |_| {})
    }

    fn shelf(first: Result<(&str, i64), &str>) -> Arc<Shelf> {
        let first = first.map(|(t, v)| ConfigText { text: t.into(), version: Some(v) }).map_err(str::to_string);
        let history = first.iter().cloned().collect();
        Arc::new(Shelf(Mutex::new(first), Mutex::new(0), Mutex::new(history), Mutex::new(0)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_version_is_read_on_its_event_at_once_and_otherwise_within_a_minute() {
        let shelf = shelf(Ok((GOOD, 1)));
        let live = live(&shelf);
        let (config, version) = live.current(false).await.unwrap();
        assert!(config.dry_run);
        assert_eq!(version, Some(1));
        shelf.put(&GOOD.replace("dry_run: true", "dry_run: false"), 2);
        tokio::time::advance(Duration::from_secs(30)).await;
        let (config, version) = live.current(false).await.unwrap();
        assert_eq!((config.dry_run, version), (true, Some(1)), "not looked again within the minute");
        let (config, version) = live.current(true).await.unwrap();
        assert_eq!((config.dry_run, version), (false, Some(2)), "the change event reads it at once");
        shelf.put(GOOD, 3);
        tokio::time::advance(CHECK_EVERY).await;
        let (config, version) = live.current(false).await.unwrap();
        assert_eq!((config.dry_run, version), (true, Some(3)), "a lost event is made up within a minute");
        assert_eq!(*shelf.1.lock().unwrap(), 3, "three looks, no more");
    }

    #[tokio::test(start_paused = true)]
    async fn a_bad_version_keeps_the_last_good_one_and_is_judged_once() {
        let shelf = shelf(Ok((GOOD, 4)));
        static REFUSED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let build: Build<Config> = Box::new(|config| Box::pin(async move { Ok(config) }));
        let live = Live::new("schedule", Box::new(ShelfHome(Arc::clone(&shelf))), build, |doc| {
            assert_eq!(doc["ConfigRefused"], 1);
            REFUSED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        live.current(false).await.unwrap();
        shelf.put("cluster: c\npools: [", 5);
        for _ in 0..3 {
            let (config, version) = live.current(true).await.unwrap();
            assert_eq!((config.dry_run, version), (true, Some(4)));
        }
        assert_eq!(REFUSED.load(std::sync::atomic::Ordering::SeqCst), 1, "one error and one metric per bad version");
        shelf.put(&GOOD.replace("dry_run: true", "dry_run: false"), 6);
        let (config, version) = live.current(true).await.unwrap();
        assert_eq!((config.dry_run, version), (false, Some(6)), "the next good version is taken");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cold_start_on_a_refused_version_runs_on_the_newest_good_one_before_it() {
        let shelf = shelf(Ok((GOOD, 1)));
        shelf.put(&GOOD.replace("dry_run: true", "dry_run: false"), 2);
        shelf.put(&GOOD.replace("region: eu-west-1", "region: elsewhere-1"), 3);
        shelf.put("cluster: c\npools: [", 4);
        static REFUSED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        // Version 3 parses but cannot be started on (as a config for another region).
        let build: Build<Config> = Box::new(|config| {
            Box::pin(async move {
                if config.region == "elsewhere-1" {
                    Err(StartError::Region { config: config.region.clone(), running: "eu-west-1".into() })
                } else {
                    Ok(config)
                }
            })
        });
        let live = Live::new("schedule", Box::new(ShelfHome(Arc::clone(&shelf))), build, |_| {
            REFUSED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        let (config, version) = live.current(false).await.unwrap();
        assert_eq!((config.dry_run, version), (false, Some(2)), "the newest good version before the refused 4");
        for _ in 0..3 {
            tokio::time::advance(CHECK_EVERY).await;
            assert_eq!(live.current(false).await.unwrap().1, Some(2));
        }
        assert_eq!(REFUSED.load(std::sync::atomic::Ordering::SeqCst), 1, "the refused version is reported once");
        assert_eq!(*shelf.3.lock().unwrap(), 1, "the history is read once");
        shelf.put(GOOD, 5);
        assert_eq!(live.current(true).await.unwrap().1, Some(5), "the next good version is taken");
    }

    #[tokio::test(start_paused = true)]
    async fn with_no_good_version_before_the_refused_one_the_error_says_so_and_history_is_read_once() {
        let shelf = shelf(Ok(("", 1)));
        shelf.put("cluster: c\npools: [", 2);
        let live = live(&shelf);
        let err = live.current(false).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "no usable config in SSM parameter /ballast/c/config yet: version 2 was refused and no earlier version is good (see the errors logged)"
        );
        tokio::time::advance(RETRY_UNUSABLE_EVERY).await;
        live.current(false).await.unwrap_err();
        assert_eq!(*shelf.3.lock().unwrap(), 1, "not read again for the same refused version");
        shelf.put(GOOD, 3);
        tokio::time::advance(RETRY_UNUSABLE_EVERY).await;
        assert_eq!(live.current(false).await.unwrap().1, Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_warm_function_takes_the_good_version_written_before_a_refused_one_never_an_older_one() {
        let shelf = shelf(Ok((GOOD, 1)));
        let live = live(&shelf);
        live.current(false).await.unwrap();
        // Going live and a broken hand edit within seconds: the warm function takes 2, as a
        // cold one does, rather than staying dry on 1.
        shelf.put(&GOOD.replace("dry_run: true", "dry_run: false"), 2);
        shelf.put("cluster: c\npools: [", 3);
        let (config, version) = live.current(true).await.unwrap();
        assert_eq!((config.dry_run, version), (false, Some(2)));
        // A bad version on top of the one in force: it stays, nothing older is taken.
        shelf.put("cluster: c\npools: [", 4);
        assert_eq!(live.current(true).await.unwrap().1, Some(2));
        tokio::time::advance(CHECK_EVERY).await;
        assert_eq!(live.current(false).await.unwrap().1, Some(2));
        assert_eq!(*shelf.3.lock().unwrap(), 2, "the history read once per refused version");
    }

    #[tokio::test(start_paused = true)]
    async fn no_config_yet_is_a_clear_error_looked_at_again_soon() {
        let shelf = shelf(Err(
            "there is no config at /ballast/c/config yet: write one with `ballast config push ballast.yaml`",
        ));
        let live = live(&shelf);
        let err = live.current(false).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "no usable config in SSM parameter /ballast/c/config yet: it could not be read (see the error logged)"
        );
        shelf.put("", 1);
        live.current(false).await.unwrap_err();
        assert_eq!(*shelf.1.lock().unwrap(), 1, "not read again at once");
        tokio::time::advance(RETRY_UNUSABLE_EVERY).await;
        let err = live.current(false).await.unwrap_err();
        assert!(err.to_string().contains("version 1 was refused"), "{err}");
        shelf.put(GOOD, 2);
        tokio::time::advance(RETRY_UNUSABLE_EVERY).await;
        assert_eq!(live.current(false).await.unwrap().1, Some(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_that_failed_for_a_passing_reason_is_tried_again() {
        let shelf = shelf(Ok((GOOD, 1)));
        static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let build: Build<Config> = Box::new(|config| {
            Box::pin(async move {
                if CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    Err(StartError::NoCredentials)
                } else {
                    Ok(config)
                }
            })
        });
        let live = Live::new("schedule", Box::new(ShelfHome(Arc::clone(&shelf))), build, |_| panic!("not a refusal"));
        live.current(false).await.unwrap_err();
        tokio::time::advance(RETRY_UNUSABLE_EVERY).await;
        assert_eq!(live.current(false).await.unwrap().1, Some(1));
    }

    #[test]
    fn parameter_store_change_is_known_by_its_source_and_detail_type() {
        let fixture: Value = serde_json::from_str(include_str!("../../../events/ssm-parameter-change.json")).unwrap();
        assert!(is_config_change(&fixture));
        let tick: Value = serde_json::from_str(include_str!("../../../events/scheduled-reconcile.json")).unwrap();
        assert!(!is_config_change(&tick));
    }
}
