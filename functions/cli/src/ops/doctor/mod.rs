//! `ballast doctor`: checks a deployment's wiring through the AWS APIs and says what
//! is wrong and how to fix it. Resource names follow the templates' conventions
//! (`ballast-CLUSTER-...`), each overridable.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{KeyType, ScalarAttributeType, TableStatus, TimeToLiveStatus};
use aws_sdk_eventbridge::types::RuleState;
use aws_sdk_sqs::types::QueueAttributeName;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use ballast_core::config::{
    check_one_role, resolve_pool_asgs, selectors, AsgRef, AsgSelector, Config, ResolveError, FUNCTIONS_GROUP,
};
use ballast_core::function::Function;
use std::collections::BTreeMap;

use ballast_aws::autoscaling::{purchases_spot, AwsAutoscaling};
use ballast_aws::state::{KEY, TTL_ATTRIBUTE};

mod asgs;
pub mod cluster;
mod wiring;
pub use wiring::{Target, Wiring, QUEUE_RULES};

/// The tag the templates' IAM policies require on every ASG Ballast changes.
pub const POOL_TAG: &str = "ballast.io/pool";
/// The tag (value: the cluster's name) the templates' IAM policy also requires, so another
/// cluster's Ballast in the same account cannot change these ASGs.
pub const CLUSTER_TAG: &str = "ballast.io/cluster";

/// The hook transition Ballast drains for.
const TERMINATING: &str = "autoscaling:EC2_INSTANCE_TERMINATING";

/// The parts that note the config version they run on: the functions and the forwarder.
pub const VERSION_PARTS: [&str; 4] =
    [Function::Schedule.name(), Function::Interruption.name(), Function::ClusterEvents.name(), "forwarder"];
/// A function takes a new version within a minute (its change event, else its minute's look).
const FUNCTIONS_FOLLOW_WITHIN: chrono::Duration = chrono::Duration::minutes(2);
/// The forwarder looks every minute and says so in demand events at least every heartbeat
/// (5 minutes by default).
const FORWARDER_FOLLOWS_WITHIN: chrono::Duration = chrono::Duration::minutes(7);

pub use ballast_core::finding::Finding;

fn ok(check: impl Into<String>, detail: impl Into<String>) -> Finding {
    Finding::ok(check, detail)
}

fn bad(check: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding::bad(check, detail, fix)
}

/// The top-level keys (and pools, by name) in which two configs differ.
fn differing_keys(a: &Config, b: &Config) -> Vec<String> {
    let (a, b) = (serde_json::to_value(a).unwrap_or_default(), serde_json::to_value(b).unwrap_or_default());
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else { return vec!["(everything)".into()] };
    let mut keys: Vec<String> = a.keys().chain(b.keys()).filter(|k| a.get(*k) != b.get(*k)).cloned().collect();
    keys.sort();
    keys.dedup();
    keys
}

/// An AWS call's failure in words: the call, the service and why (never the SDK's Debug
/// form).
fn err_text<E>(e: SdkError<E>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    ballast_aws::describe(&e)
}

/// The fix for a call that failed: `otherwise` (a permission, a deploy) unless the call
/// never reached the service or the credentials were refused, which no IAM change mends.
fn fix_for(trouble: ballast_aws::Trouble, region: Option<&str>, otherwise: impl Into<String>) -> String {
    match trouble {
        ballast_aws::Trouble::Unreachable => format!(
            "AWS did not answer: check the region ({}) and any AWS_ENDPOINT_URL, the network, proxy and DNS, \
             and in a VPC without internet access an interface VPC endpoint for the service",
            region.unwrap_or("none set")
        ),
        ballast_aws::Trouble::Unauthenticated => {
            "the credentials were refused: check them (`aws sts get-caller-identity`): an expired session, \
             the wrong profile"
                .to_string()
        }
        // A refusal is about who asks, not about the stack: its own fix (deploy it,
        // create it) would send the user the wrong way.
        ballast_aws::Trouble::Denied => "AWS refused the call to whoever runs doctor: give that principal the \
             read permission the error names (doctor only describes, lists and reads)"
            .to_string(),
        _ => otherwise.into(),
    }
}

/// The kind of trouble a port error met, when its source is the SDK error of the call
/// `E` (every AWS adapter keeps it so).
fn port_trouble<E>(e: &ballast_core::ports::PortError) -> ballast_aws::Trouble
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match e.source.as_deref().and_then(|s| s.downcast_ref::<SdkError<E>>()) {
        Some(sdk) => ballast_aws::trouble(sdk),
        None => ballast_aws::trouble_in_chain(e),
    }
}

/// [`port_trouble`] of a `GetParameter` call.
fn parameter_trouble(e: &ballast_core::ports::PortError) -> ballast_aws::Trouble {
    port_trouble::<aws_sdk_ssm::operation::get_parameter::GetParameterError>(e)
}

/// A describe call's failure: `not found` only when the service says so; anything else
/// (no answer, no permission) as it is.
fn not_found_or<E>(e: SdkError<E>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let missing = e
        .as_service_error()
        .and_then(|s| s.code())
        .is_some_and(|code| code.contains("NotFound") || code.contains("NonExistent") || code.contains("DoesNotExist"));
    if missing {
        format!("not found: {}", err_text(e))
    } else {
        err_text(e)
    }
}

/// `ballast doctor`'s AWS checks, with the clients they read through.
pub struct Doctor {
    /// Reads the cluster and its access entries.
    pub eks: aws_sdk_eks::Client,
    /// Reads the config parameter.
    pub ssm: aws_sdk_ssm::Client,
    /// Reads the state table.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// Reads the queues.
    pub sqs: aws_sdk_sqs::Client,
    /// Reads the rules and the event bus.
    pub events: aws_sdk_eventbridge::Client,
    /// Reads the pools' ASGs and their hooks.
    pub autoscaling: AwsAutoscaling,
}

impl Doctor {
    /// Clients made from the shared SDK config.
    pub fn new(conf: &aws_config::SdkConfig) -> Self {
        Doctor {
            eks: aws_sdk_eks::Client::new(conf),
            ssm: aws_sdk_ssm::Client::new(conf),
            dynamodb: aws_sdk_dynamodb::Client::new(conf),
            sqs: aws_sdk_sqs::Client::new(conf),
            events: aws_sdk_eventbridge::Client::new(conf),
            autoscaling: AwsAutoscaling::new(conf),
        }
    }

    /// The region the clients ask.
    fn region(&self) -> Option<&str> {
        self.ssm.config().region().map(|r| r.as_ref())
    }

    /// Every check of the deployment `wiring` names, for `config`, in order: each passed or what to fix.
    pub async fn check(&self, config: &Config, wiring: &Wiring) -> Vec<Finding> {
        let mut findings = vec![self.config_home(config, &wiring.config_parameter).await];
        findings.push(self.versions(&wiring.table, &wiring.config_parameter, chrono::Utc::now()).await);
        findings.extend(self.table(&wiring.table).await);
        let queue_arn = self.queues(wiring, &mut findings).await;
        self.rules(wiring, queue_arn.as_deref(), &mut findings).await;
        self.asgs(config, &mut findings).await;
        self.roles(config, &mut findings).await;
        findings
    }

    /// The function roles' way into the cluster: an access entry each, in the group the
    /// RBAC binds. On a cluster that authenticates with `aws-auth` only, the roles are
    /// returned for the caller to look up there.
    pub async fn access(&self, config: &Config) -> (Finding, Option<Vec<String>>) {
        let check = "cluster access entries".to_string();
        let cluster = match self.eks.describe_cluster().name(&config.cluster).send().await {
            Ok(out) => out.cluster,
            Err(e) => {
                let fix = fix_for(
                    ballast_aws::trouble(&e),
                    self.region(),
                    format!(
                        "check `cluster` and `region` in the config, and that doctor may eks:DescribeCluster {}",
                        config.cluster
                    ),
                );
                return (bad(check, format!("cannot describe cluster {}: {}", config.cluster, err_text(e)), fix), None);
            }
        };
        let Some(cluster) = cluster else {
            return (bad(check, "DescribeCluster answered without a cluster", "run doctor again"), None);
        };
        // arn:PARTITION:eks:REGION:ACCOUNT:cluster/NAME
        let arn: Vec<&str> = cluster.arn().unwrap_or_default().split(':').collect();
        let (Some(partition), Some(account)) = (arn.get(1), arn.get(4)) else {
            return (
                bad(
                    check,
                    format!("the cluster's ARN `{}` is not an EKS ARN", cluster.arn().unwrap_or_default()),
                    "run doctor again",
                ),
                None,
            );
        };
        let roles: Vec<String> = Function::ALL
            .iter()
            .map(|f| format!("arn:{partition}:iam::{account}:role/{}", f.deployed_name(&config.cluster)))
            .collect();
        let mode = cluster.access_config().and_then(|a| a.authentication_mode());
        if mode == Some(&aws_sdk_eks::types::AuthenticationMode::ConfigMap) {
            return (
                ok(check, "the cluster authenticates with aws-auth only (CONFIG_MAP): no access entries; aws-auth is checked instead"),
                Some(roles),
            );
        }
        // With API_AND_CONFIG_MAP, a role with no entry may be mapped in aws-auth instead.
        let config_map_too = mode != Some(&aws_sdk_eks::types::AuthenticationMode::Api);
        let mut missing = Vec::new();
        let mut in_aws_auth = Vec::new();
        for role in &roles {
            match self.eks.describe_access_entry().cluster_name(&config.cluster).principal_arn(role).send().await {
                Ok(out) => {
                    let groups = out.access_entry().map(|e| e.kubernetes_groups()).unwrap_or_default();
                    if !groups.iter().any(|g| g == FUNCTIONS_GROUP) {
                        missing.push((role, format!("{role} is in {groups:?}, not {FUNCTIONS_GROUP}")));
                    }
                }
                Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => {
                    if config_map_too {
                        in_aws_auth.push(role.clone());
                    } else {
                        missing.push((role, format!("{role} has no access entry")))
                    }
                }
                Err(e) => {
                    let fix = fix_for(
                        ballast_aws::trouble(&e),
                        self.region(),
                        "allow eks:DescribeAccessEntry on the cluster to whoever runs doctor",
                    );
                    return (bad(check, format!("cannot read the access entry of {role}: {}", err_text(e)), fix), None);
                }
            }
        }
        let in_aws_auth = (!in_aws_auth.is_empty()).then_some(in_aws_auth);
        if missing.is_empty() {
            let detail = match &in_aws_auth {
                None => format!("the {} function roles are in {FUNCTIONS_GROUP}", roles.len()),
                Some(rest) => format!(
                    "{} of {} function roles have an entry in {FUNCTIONS_GROUP}; {} none (looked up in aws-auth)",
                    roles.len() - rest.len(),
                    roles.len(),
                    rest.join(", ")
                ),
            };
            return (ok(check, detail), in_aws_auth);
        }
        let commands: Vec<String> = missing
            .iter()
            .map(|(role, _)| {
                format!(
                    "aws eks create-access-entry --cluster-name {} --principal-arn {role} --kubernetes-groups {FUNCTIONS_GROUP}",
                    config.cluster
                )
            })
            .collect();
        let why: Vec<String> = missing.into_iter().map(|(_, why)| why).collect();
        (
            bad(
                check,
                why.join("; "),
                format!("deploy with ClusterAccessEntries=true (-c accessEntries=true), or: {}", commands.join("; ")),
            ),
            in_aws_auth,
        )
    }

    /// The live config: there, valid, within the parameter's size, and the one given.
    async fn config_home(&self, config: &Config, parameter: &str) -> Finding {
        let check = format!("config {parameter}");
        let live = match ballast_aws::ssm::read_if_any(&self.ssm, parameter).await {
            Ok(Some(live)) => live,
            Ok(None) => {
                return bad(
                    check,
                    "not there: the functions and the forwarder have no config to run on",
                    "ballast config push ballast.yaml",
                )
            }
            Err(e) => {
                let fix = fix_for(
                    parameter_trouble(&e),
                    self.region(),
                    "allow ssm:GetParameter on it to whoever runs doctor",
                );
                return bad(check, format!("cannot read it: {e}"), fix);
            }
        };
        let version = live.version;
        match Config::from_yaml(&live.text) {
            Err(e) => bad(
                check,
                format!("version {version} is invalid (the functions stay on the last good version): {e}"),
                "ballast config push ballast.yaml (it validates first)",
            ),
            Ok(_) if live.text.len() > ballast_core::config::PARAMETER_MAX_BYTES => bad(
                check,
                format!(
                    "version {version} has {} bytes, over the parameter's {}",
                    live.text.len(),
                    ballast_core::config::PARAMETER_MAX_BYTES
                ),
                "shorten it and push it again",
            ),
            // The kill switch leaves the live version in dry run and the file live: pushing
            // the file is then going live again, never a fix to suggest blindly.
            Ok(running) if running.dry_run && !config.dry_run && running == Config { dry_run: true, ..config.clone() } => bad(
                check,
                format!("version {version} is in dry run and the config given is live (the kill switch?); nothing else differs"),
                "when you mean to go live again: ballast config push ballast.yaml",
            ),
            Ok(running) if running != *config => bad(
                check,
                format!("version {version} differs from the config given here in: {}", differing_keys(&running, config).join(", ")),
                "ballast config push ballast.yaml (it shows the difference), or `ballast config pull` to see what runs",
            ),
            Ok(running) => ok(
                check,
                format!(
                    "version {version}, {} byte(s), {}, the same as the config given",
                    live.text.len(),
                    if running.dry_run { "dry run" } else { "live" }
                ),
            ),
        }
    }

    /// Whether the functions and the forwarder run the parameter's version: each notes
    /// the version it takes in the state table (the forwarder's comes in its demand events,
    /// at least every heartbeat). Functions follow within a minute of a change, the
    /// forwarder within its minute plus a heartbeat; one idle since (an interruption
    /// function with no event) is reported, not failed.
    async fn versions(&self, table: &str, parameter: &str, now: chrono::DateTime<chrono::Utc>) -> Finding {
        let check = "config versions".to_string();
        let live = match ballast_aws::ssm::read_if_any(&self.ssm, parameter).await {
            Ok(Some(live)) => live,
            Ok(None) => return bad(check, format!("no config at {parameter}"), "ballast config push ballast.yaml"),
            Err(e) => {
                let fix = fix_for(parameter_trouble(&e), self.region(), "allow ssm:GetParameter on it");
                return bad(check, format!("cannot read {parameter}: {e}"), fix);
            }
        };
        let store = ballast_aws::state::DynamoStore::from_client(self.dynamodb.clone(), table);
        let notes = match store.config_versions(&VERSION_PARTS).await {
            Ok(notes) => notes,
            Err(e) => {
                let fix = fix_for(ballast_aws::trouble_in_chain(&e), self.region(), "deploy the stack");
                return bad(check, format!("cannot read the notes in {table}: {e}"), fix);
            }
        };
        let since_written = live.modified.map(|m| now - m).unwrap_or_else(chrono::Duration::zero);
        let said: Vec<String> = VERSION_PARTS
            .iter()
            .map(|part| match notes.iter().find(|n| n.part == *part) {
                Some(n) => format!("{part} {} (noted {})", n.version, n.at.format("%Y-%m-%d %H:%M:%SZ")),
                None => format!("{part} none noted"),
            })
            .collect();
        let detail = format!("parameter version {}; {}", live.version, said.join(", "));
        let forwarder = notes.iter().find(|n| n.part == "forwarder");
        match forwarder {
            // Right after the overlay is applied no forwarder has said yet (its first demand
            // event comes within a heartbeat): said, not failed.
            None => ok(check, format!("{detail} (no forwarder report yet: `kubectl -n ballast logs deploy/ballast-forwarder`)")),
            Some(f) if f.version < live.version && since_written > FORWARDER_FOLLOWS_WITHIN => bad(
                check,
                detail,
                "the forwarder runs an older version: `kubectl -n ballast logs deploy/ballast-forwarder` (a refused version is logged, ballast_forwarder_config_refused_total)",
            ),
            _ => match notes.iter().find(|n| n.part == Function::Schedule.name()) {
                Some(s) if s.version < live.version && since_written > FUNCTIONS_FOLLOW_WITHIN => bad(
                    check,
                    detail,
                    "the schedule function runs an older version: its log says why (\"config refused\", metric ConfigRefused)",
                ),
                _ => ok(check, detail),
            },
        }
    }

    async fn table(&self, table: &str) -> Vec<Finding> {
        let check = format!("table {table}");
        let described = match self.dynamodb.describe_table().table_name(table).send().await {
            Ok(out) => out,
            Err(e) => {
                let fix = fix_for(
                    ballast_aws::trouble(&e),
                    self.region(),
                    "deploy the stack, or set state_table to the table's name",
                );
                return vec![bad(check, not_found_or(e), fix)];
            }
        };
        let mut findings = Vec::new();
        let Some(t) = described.table() else { return vec![bad(check, "no description", "check the table")] };
        let hash_key =
            t.key_schema().iter().find(|k| k.key_type() == &KeyType::Hash).map(|k| k.attribute_name().to_string());
        let key_is_string = t
            .attribute_definitions()
            .iter()
            .any(|a| a.attribute_name() == KEY && a.attribute_type() == &ScalarAttributeType::S);
        if hash_key.as_deref() != Some(KEY) || !key_is_string {
            findings.push(bad(
                &check,
                format!("partition key is {hash_key:?}, not `{KEY}` (string)"),
                format!("recreate the table with partition key `{KEY}` of type S"),
            ));
        } else if t.table_status() != Some(&TableStatus::Active) {
            findings.push(bad(
                &check,
                format!("status {}", t.table_status().map_or("unknown", |s| s.as_str())),
                "wait until the table is ACTIVE",
            ));
        } else {
            findings.push(ok(&check, format!("ACTIVE, partition key `{KEY}`")));
        }
        let ttl = self.dynamodb.describe_time_to_live().table_name(table).send().await;
        let ttl_check = format!("table {table} TTL");
        match ttl.ok().and_then(|o| o.time_to_live_description().cloned()) {
            Some(d) if d.time_to_live_status() == Some(&TimeToLiveStatus::Enabled) && d.attribute_name() == Some(TTL_ATTRIBUTE) => {
                findings.push(ok(ttl_check, format!("enabled on `{TTL_ATTRIBUTE}`")))
            }
            other => findings.push(bad(
                ttl_check,
                format!(
                    "not enabled on `{TTL_ATTRIBUTE}` (time to live {})",
                    other.as_ref().and_then(|d| d.time_to_live_status()).map_or("unknown", |s| s.as_str())
                ),
                format!("aws dynamodb update-time-to-live --table-name {table} --time-to-live-specification Enabled=true,AttributeName={TTL_ATTRIBUTE}"),
            )),
        }
        findings
    }
}

#[cfg(test)]
mod tests {
    use ballast_aws::Trouble;

    /// A check's own fix (deploy the stack, create the parameter) answers a resource that
    /// is missing; a refusal, an unreachable endpoint or refused credentials each get theirs.
    #[test]
    fn the_fix_follows_why_the_call_failed() {
        let own = "deploy the stack (sam deploy or cdk deploy)";
        assert_eq!(super::fix_for(Trouble::NotFound, Some("eu-west-1"), own), own);
        let denied = super::fix_for(Trouble::Denied, Some("eu-west-1"), own);
        assert!(denied.contains("permission") && !denied.contains("deploy"), "{denied}");
        let unreachable = super::fix_for(Trouble::Unreachable, Some("eu-west-1"), own);
        assert!(unreachable.contains("eu-west-1") && !unreachable.contains("deploy"), "{unreachable}");
        let credentials = super::fix_for(Trouble::Unauthenticated, None, own);
        assert!(credentials.contains("aws sts get-caller-identity"), "{credentials}");
    }
}
