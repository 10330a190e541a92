//! A Ballast deployment inside moto: a launch template, a spot ASG
//! (MixedInstancesPolicy, on-demand 0%), an on-demand ASG, the state table, the
//! dead-letter queue; and the app wired to them with the real AWS adapters.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_autoscaling::types::{
    InstancesDistribution, LaunchTemplate, LaunchTemplateOverrides, LaunchTemplateSpecification, MixedInstancesPolicy,
};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, TimeToLiveSpecification,
};
use aws_sdk_sqs::types::QueueAttributeName;
use ballast_aws::{AwsAutoscaling, DynamoStore, SqsDeadLetters, SqsRedelivery};
use ballast_core::config::{Config, PoolConfig};
use ballast_core::event::{parse_event_value, Event, EventKind, FORWARDER_SOURCE};
use ballast_core::observe::{Demand, LifecycleState, NodeState};
use ballast_core::ports::FixedClock;
use ballast_core::ports::{Autoscaling, Cluster, DrainReport, PortError};
use ballast_core::reconcile::Reconciler;
use ballast_lambda::App;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::moto::{Moto, Recorder, Unlaunched};
use crate::timeline::Timeline;

pub const SPOT: &str = "ballast-test-spot";
pub const ON_DEMAND: &str = "ballast-test-on-demand";
pub const TABLE: &str = "ballast-test-state";
pub const DLQ: &str = "ballast-test-events-dlq";

/// Kubernetes as the tests need it without an API server: every in-service instance
/// of the pool is a Ready node; cordons and drains are recorded.
#[derive(Debug, Clone)]
pub struct MirrorCluster {
    autoscaling: AwsAutoscaling,
    pub cordoned: Arc<Mutex<BTreeSet<String>>>,
    pub drained: Arc<Mutex<Vec<String>>>,
    pub headroom: Arc<Mutex<Option<u32>>>,
}

#[async_trait]
impl Cluster for MirrorCluster {
    async fn pool_nodes(&self, pool: &PoolConfig) -> Result<Vec<NodeState>, PortError> {
        let (spot, od) = self.autoscaling.describe_pool(pool).await?;
        let cordoned = self.cordoned.lock().expect("cordoned").clone();
        Ok(spot
            .iter()
            .chain(od.as_ref())
            .flat_map(|a| a.instances.iter())
            .filter(|i| i.lifecycle_state == LifecycleState::InService)
            .map(|i| {
                let name = format!("ip-{}.eu-west-1.compute.internal", i.id);
                NodeState {
                    allocatable: None,
                    unschedulable: cordoned.contains(&name),
                    name,
                    instance_id: i.id.clone(),
                    ready: true,
                }
            })
            .collect())
    }
    async fn headroom(&self, pool: &PoolConfig) -> Result<Vec<ballast_core::shape::SlotState>, PortError> {
        let replicas = *self.headroom.lock().expect("headroom");
        let first =
            |n| ballast_core::shape::SlotState { slot: 0, shape: pool.headroom.unit_shape(), replicas: Some(n) };
        Ok(replicas.map(first).into_iter().collect())
    }
    async fn set_headroom(
        &self,
        _: &PoolConfig,
        slot: usize,
        _: &ballast_core::shape::PodShape,
        replicas: u32,
    ) -> Result<(), PortError> {
        assert_eq!(slot, 0, "these tests report no pod shapes: one Deployment");
        *self.headroom.lock().expect("headroom") = Some(replicas);
        Ok(())
    }
    async fn pool_demand(&self, _: &PoolConfig, _: DateTime<Utc>) -> Result<Option<Demand>, PortError> {
        Ok(None)
    }
    async fn cordon(&self, node: &str) -> Result<(), PortError> {
        self.cordoned.lock().expect("cordoned").insert(node.to_string());
        Ok(())
    }
    async fn uncordon(&self, node: &str) -> Result<(), PortError> {
        self.cordoned.lock().expect("cordoned").remove(node);
        Ok(())
    }
    async fn drain(&self, node: &str, _: Duration) -> Result<DrainReport, PortError> {
        self.drained.lock().expect("drained").push(node.to_string());
        Ok(DrainReport::default())
    }
}

pub type MotoApp = App<AwsAutoscaling, MirrorCluster, DynamoStore, FixedClock, SqsDeadLetters>;

/// The deployment, its clients, and the interceptors on the Auto Scaling client.
pub struct Deployment {
    pub sdk: SdkConfig,
    pub autoscaling: aws_sdk_autoscaling::Client,
    /// The same interceptors but no injected faults: the mirrored cluster's reads.
    pub cluster_view: aws_sdk_autoscaling::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub dlq_url: String,
    pub recorder: Recorder,
    pub unlaunched: Unlaunched,
    /// When each call of the function's clients (and the mirrored cluster's) started and ended.
    pub timeline: Timeline,
    pub clock: FixedClock,
}

pub fn config_yaml(dry_run: bool, extra_fallback: &str) -> String {
    format!(
        r#"
cluster: test
region: eu-west-1
account: "123456789012"
state_table: {TABLE}
dry_run: {dry_run}
pools:
  - name: general
    spot_asgs: [{SPOT}]
    on_demand_asg: {ON_DEMAND}
    fallback:
      spot_launch_grace: 2m
      max_on_demand: 10
      failback_after: 30m
      failback_step: 1
      {extra_fallback}
    headroom: {{ percent: 10, min: 0, max: 10 }}
"#
    )
}

/// The cluster's name in the config and in the ASGs' `ballast.io/cluster` tag.
pub const CLUSTER: &str = "test";

/// An ASG tag as the templates' IAM policies read it.
pub fn asg_tag(asg: &str, key: &str, value: &str) -> aws_sdk_autoscaling::types::Tag {
    aws_sdk_autoscaling::types::Tag::builder()
        .key(key)
        .value(value)
        .resource_id(asg)
        .resource_type("auto-scaling-group")
        .propagate_at_launch(false)
        .build()
}

/// The tags the templates' IAM policies require on the ASGs Ballast changes.
fn pool_tags(asg: &str) -> [aws_sdk_autoscaling::types::Tag; 2] {
    [asg_tag(asg, "ballast.io/pool", "general"), asg_tag(asg, "ballast.io/cluster", CLUSTER)]
}

/// Sizes and options of a deployment in moto.
#[derive(Debug, Clone)]
pub struct Setup {
    pub spot: i32,
    pub spot_max: i32,
    pub on_demand: (i32, i32),
    pub faults: Option<crate::moto::Faults>,
}

impl Deployment {
    /// Creates the AWS resources in moto.
    pub async fn create(moto: &Moto, spot: i32, on_demand: (i32, i32), now: DateTime<Utc>) -> Deployment {
        Self::create_with(moto, Setup { spot, spot_max: 20, on_demand, faults: None }, now).await
    }

    pub async fn create_with(moto: &Moto, setup: Setup, now: DateTime<Utc>) -> Deployment {
        let Setup { spot, spot_max, on_demand, faults } = setup;
        let sdk = moto.sdk().await;
        let ec2 = aws_sdk_ec2::Client::new(&sdk);
        ec2.create_launch_template()
            .launch_template_name("ballast-test")
            .launch_template_data(
                aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                    .image_id("ami-12c6146b")
                    .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
                    .build(),
            )
            .send()
            .await
            .expect("launch template");
        let recorder = Recorder::default();
        let unlaunched = Unlaunched::default();
        let mut builder = aws_sdk_autoscaling::config::Builder::from(&sdk)
            .interceptor(recorder.clone())
            .interceptor(unlaunched.clone());
        // The mirrored cluster's reads stand in for Kubernetes: they meet no injected fault
        // (a fault there is not one of Ballast's calls, and counting them would shift where
        // Ballast's own calls fail).
        let timeline = Timeline::new("Auto Scaling");
        let cluster_view =
            aws_sdk_autoscaling::Client::from_conf(builder.clone().interceptor(timeline.part("Kubernetes")).build());
        builder = builder.interceptor(timeline.clone());
        if let Some(faults) = &faults {
            builder = builder.interceptor(faults.clone());
        }
        let autoscaling = aws_sdk_autoscaling::Client::from_conf(builder.build());
        let template = LaunchTemplateSpecification::builder().launch_template_name("ballast-test").build();
        autoscaling
            .create_auto_scaling_group()
            .auto_scaling_group_name(SPOT)
            .set_tags(Some(pool_tags(SPOT).to_vec()))
            .min_size(0)
            .max_size(spot_max)
            .desired_capacity(spot)
            .availability_zones("eu-west-1a")
            .availability_zones("eu-west-1b")
            .mixed_instances_policy(
                MixedInstancesPolicy::builder()
                    .launch_template(
                        LaunchTemplate::builder()
                            .launch_template_specification(template.clone())
                            .overrides(LaunchTemplateOverrides::builder().instance_type("m5.large").build())
                            .overrides(LaunchTemplateOverrides::builder().instance_type("m5a.large").build())
                            .build(),
                    )
                    .instances_distribution(
                        InstancesDistribution::builder()
                            .on_demand_base_capacity(0)
                            .on_demand_percentage_above_base_capacity(0)
                            .build(),
                    )
                    .build(),
            )
            .send()
            .await
            .expect("spot ASG");
        autoscaling
            .create_auto_scaling_group()
            .auto_scaling_group_name(ON_DEMAND)
            .set_tags(Some(pool_tags(ON_DEMAND).to_vec()))
            .min_size(on_demand.0)
            .max_size(20)
            .desired_capacity(on_demand.1)
            .availability_zones("eu-west-1a")
            .launch_template(template)
            .send()
            .await
            .expect("on-demand ASG");
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        dynamodb
            .create_table()
            .table_name(TABLE)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("pk")
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .expect("attribute"),
            )
            .key_schema(KeySchemaElement::builder().attribute_name("pk").key_type(KeyType::Hash).build().expect("key"))
            .send()
            .await
            .expect("table");
        dynamodb
            .update_time_to_live()
            .table_name(TABLE)
            .time_to_live_specification(
                TimeToLiveSpecification::builder().enabled(true).attribute_name("expires_at").build().expect("ttl"),
            )
            .send()
            .await
            .expect("ttl");
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let dlq_url =
            sqs.create_queue().queue_name(DLQ).send().await.expect("dlq").queue_url().unwrap_or_default().to_string();
        // The recorder starts empty and faults start now: setup calls are not Ballast's.
        recorder.0.lock().expect("recorder").clear();
        if let Some(faults) = &faults {
            faults.enable();
        }
        Deployment {
            sdk,
            autoscaling,
            cluster_view,
            sqs,
            dlq_url,
            recorder,
            unlaunched,
            timeline,
            clock: FixedClock::new(now),
        }
    }

    pub fn app(&self, config: Config) -> (MotoApp, MirrorCluster) {
        self.app_as(config, "test", &self.sdk)
    }

    /// The app as function `function` runs it, its AWS calls made with `sdk` (e.g. with
    /// the function's own credentials, so moto's request log tells its calls apart). The
    /// mirrored cluster reads through the deployment's own client, without its faults:
    /// those are not the function's calls.
    pub fn app_as(&self, config: Config, function: &'static str, sdk: &SdkConfig) -> (MotoApp, MirrorCluster) {
        let functions_autoscaling =
            if std::ptr::eq(sdk, &self.sdk) { self.autoscaling.clone() } else { aws_sdk_autoscaling::Client::new(sdk) };
        let timed_ec2 = |sdk: &SdkConfig, part| {
            aws_sdk_ec2::Client::from_conf(
                aws_sdk_ec2::config::Builder::from(sdk).interceptor(self.timeline.part(part)).build(),
            )
        };
        let autoscaling = AwsAutoscaling::from_clients(functions_autoscaling, timed_ec2(sdk, "EC2"));
        let mirror = AwsAutoscaling::from_clients(self.cluster_view.clone(), timed_ec2(&self.sdk, "Kubernetes"));
        let dynamodb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(sdk).interceptor(self.timeline.part("state table")).build(),
        );
        let cluster = MirrorCluster {
            autoscaling: mirror,
            cordoned: Default::default(),
            drained: Default::default(),
            headroom: Default::default(),
        };
        let origin = config.origin();
        let app = App {
            function,
            reconciler: Reconciler {
                autoscaling,
                cluster: cluster.clone(),
                store: DynamoStore::from_client(dynamodb, config.state_table.clone()),
                clock: self.clock.clone(),
                owner: "test".into(),
                config: Arc::new(config),
            },
            origin,
            dead_letters: Some(SqsDeadLetters::new(sdk, &self.dlq_url)),
            max_receives: None,
            redelivery: Some(Arc::new(SqsRedelivery::new(sdk))),
            metrics: ballast_lambda::app::metrics_to_stderr,
        };
        (app, cluster)
    }

    /// (desired, instance ids) of an ASG as moto has it (unfiltered).
    pub async fn asg(&self, name: &str) -> (i32, Vec<String>) {
        let raw = aws_sdk_autoscaling::Client::new(&self.sdk);
        let out = raw.describe_auto_scaling_groups().auto_scaling_group_names(name).send().await.expect("describe");
        let group = &out.auto_scaling_groups()[0];
        let ids = group.instances().iter().filter_map(|i| i.instance_id().map(str::to_string)).collect();
        (group.desired_capacity().unwrap_or(0), ids)
    }

    /// The rest of a deployment's wiring, as the templates make it: the events queue
    /// redriving to the dead-letter queue, one rule per AWS event into the queue, the
    /// forwarder's bus and its rule to the cluster-events function.
    pub async fn wire(&self) -> String {
        let dlq_arn = self.queue_arn(&self.dlq_url).await;
        let redrive = serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5" }).to_string();
        let queue_url = self.queue("ballast-test-events", &[(QueueAttributeName::RedrivePolicy, redrive)]).await;
        let queue_arn = self.queue_arn(&queue_url).await;
        let events = aws_sdk_eventbridge::Client::new(&self.sdk);
        for (rule, kinds) in [
            ("spot-interruption", &[EventKind::SpotInterruptionWarning][..]),
            ("rebalance", &[EventKind::RebalanceRecommendation]),
            ("state-change", &[EventKind::InstanceStateChange]),
            ("launch-unsuccessful", &[EventKind::LaunchUnsuccessful, EventKind::LaunchSuccessful]),
            ("lifecycle", &[EventKind::TerminateLifecycleAction]),
            ("health", &[EventKind::HealthEvent]),
            ("config-changed", &[EventKind::ParameterStoreChange]),
        ] {
            let name = format!("ballast-test-{rule}");
            let detail_types: Vec<&str> = kinds.iter().map(|k| k.detail_type()).collect();
            let pattern = serde_json::json!({ "source": [kinds[0].source()], "detail-type": detail_types }).to_string();
            events.put_rule().name(&name).event_pattern(pattern).send().await.expect("rule");
            events
                .put_targets()
                .rule(&name)
                .targets(
                    aws_sdk_eventbridge::types::Target::builder().id("queue").arn(&queue_arn).build().expect("target"),
                )
                .send()
                .await
                .expect("targets");
        }
        events.create_event_bus().name("ballast-test").send().await.expect("bus");
        let pattern = serde_json::json!({ "source": [FORWARDER_SOURCE] }).to_string();
        events
            .put_rule()
            .name("ballast-test-forwarder")
            .event_bus_name("ballast-test")
            .event_pattern(pattern)
            .send()
            .await
            .expect("rule");
        events
            .put_targets()
            .rule("ballast-test-forwarder")
            .event_bus_name("ballast-test")
            .targets(
                aws_sdk_eventbridge::types::Target::builder()
                    .id("fn")
                    .arn("arn:aws:lambda:eu-west-1:123456789012:function:ballast-test-cluster-events")
                    .build()
                    .expect("target"),
            )
            .send()
            .await
            .expect("targets");
        queue_url
    }

    async fn queue_arn(&self, url: &str) -> String {
        let attrs = self
            .sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("queue attributes");
        attrs
            .attributes()
            .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
            .cloned()
            .unwrap_or_default()
    }

    pub async fn dead_letters(&self) -> Vec<String> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.dlq_url)
            .max_number_of_messages(10)
            .send()
            .await
            .expect("receive");
        out.messages().iter().filter_map(|m| m.body().map(str::to_string)).collect()
    }
}

/// A shipped fixture, edited (e.g. to name a real moto instance).
pub fn fixture_json(name: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let text = std::fs::read_to_string(crate::repo_root().join("events").join(name)).expect("fixture");
    let mut value: Value = serde_json::from_str(&text).expect("fixture json");
    edit(&mut value);
    value
}

pub fn event(value: &Value) -> Event {
    parse_event_value(value.clone(), None).expect("a valid event")
}

/// The envelopes as the SQS event the interruption function receives.
pub fn sqs_batch(bodies: &[(String, Value)]) -> SqsEvent {
    let records: Vec<Value> = bodies
        .iter()
        .map(|(id, body)| {
            serde_json::json!({
                "messageId": id,
                "receiptHandle": format!("handle-{id}"),
                "body": body.to_string(),
                "attributes": {},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:eu-west-1:123456789012:ballast-test-events",
                "awsRegion": "eu-west-1"
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).expect("an SQS event")
}

/// An EventBridge bus in moto whose one rule (source `ballast.kubernetes`) delivers to an
/// SQS queue: what the forwarder publishes, read back as EventBridge envelopes.
pub struct EventInbox {
    sqs: aws_sdk_sqs::Client,
    url: String,
}

impl EventInbox {
    pub async fn create(sdk: &SdkConfig, bus: &str) -> EventInbox {
        let events = aws_sdk_eventbridge::Client::new(sdk);
        let sqs = aws_sdk_sqs::Client::new(sdk);
        let queue = format!("{bus}-inbox");
        events.create_event_bus().name(bus).send().await.expect("event bus");
        let url = sqs.create_queue().queue_name(&queue).send().await.expect("queue").queue_url.expect("queue url");
        let pattern = serde_json::json!({ "source": [FORWARDER_SOURCE] }).to_string();
        events.put_rule().name("to-inbox").event_bus_name(bus).event_pattern(pattern).send().await.expect("rule");
        let arn = format!("arn:aws:sqs:eu-west-1:123456789012:{queue}");
        let target = aws_sdk_eventbridge::types::Target::builder().id("inbox").arn(arn).build().expect("target");
        events.put_targets().rule("to-inbox").event_bus_name(bus).targets(target).send().await.expect("target");
        EventInbox { sqs, url }
    }

    /// Every envelope delivered so far (each received once).
    pub async fn take(&self) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            let got = self
                .sqs
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(10)
                .send()
                .await
                .expect("receive");
            if got.messages().is_empty() {
                return out;
            }
            for m in got.messages() {
                let mut envelope: Value = serde_json::from_str(m.body().unwrap_or_default()).expect("an envelope");
                // moto leaves `account` out of what it delivers; EventBridge sets it.
                envelope["account"] = Value::from("123456789012");
                out.push(envelope);
                let receipt = m.receipt_handle().unwrap_or_default();
                self.sqs.delete_message().queue_url(&self.url).receipt_handle(receipt).send().await.expect("delete");
            }
        }
    }
}

/// An events queue as the templates make it (its visibility timeout, a redrive to a
/// dead-letter queue of its own), and a poller that does what Lambda's event source
/// mapping does: receive, invoke the interruption handler, delete what did not fail.
pub struct EventsQueue {
    pub url: String,
    pub arn: String,
    pub dlq_url: String,
}

impl Deployment {
    /// A queue with these attributes; its URL.
    pub async fn queue(&self, name: &str, attributes: &[(QueueAttributeName, String)]) -> String {
        let mut create = self.sqs.create_queue().queue_name(name);
        for (key, value) in attributes {
            create = create.attributes(key.clone(), value);
        }
        create.send().await.expect("queue").queue_url().unwrap_or_default().to_string()
    }

    pub async fn events_queue(&self, name: &str, max_receives: u32) -> EventsQueue {
        let dlq_url = self.queue(&format!("{name}-dlq"), &[]).await;
        let redrive = serde_json::json!({ "deadLetterTargetArn": self.queue_arn(&dlq_url).await, "maxReceiveCount": max_receives.to_string() });
        let url = self
            .queue(
                name,
                &[
                    (QueueAttributeName::RedrivePolicy, redrive.to_string()),
                    // The templates' 5,400 s: only the function's redelivery brings a failure back sooner.
                    (QueueAttributeName::VisibilityTimeout, "5400".to_string()),
                ],
            )
            .await;
        let arn = self.queue_arn(&url).await;
        EventsQueue { url, arn, dlq_url }
    }

    /// One poll: (handled and deleted, reported failed) message bodies.
    pub async fn poll(&self, app: &MotoApp, queue: &EventsQueue) -> (Vec<String>, Vec<String>) {
        let got = self
            .sqs
            .receive_message()
            .queue_url(&queue.url)
            .max_number_of_messages(10)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .expect("receive");
        if got.messages().is_empty() {
            return (Vec::new(), Vec::new());
        }
        let records: Vec<Value> = got
            .messages()
            .iter()
            .map(|m| {
                let count = m
                    .attributes()
                    .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount))
                    .cloned()
                    .unwrap_or_else(|| "1".into());
                serde_json::json!({
                    "messageId": m.message_id(), "receiptHandle": m.receipt_handle(), "body": m.body(),
                    "attributes": { "ApproximateReceiveCount": count }, "messageAttributes": {},
                    "eventSource": "aws:sqs", "eventSourceARN": queue.arn, "awsRegion": "eu-west-1"
                })
            })
            .collect();
        let batch: SqsEvent = serde_json::from_value(serde_json::json!({ "Records": records })).expect("an SQS event");
        let (response, _) = app.interruption(batch).await;
        let failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
        let (mut handled, mut retried) = (Vec::new(), Vec::new());
        for m in got.messages() {
            let body = m.body().unwrap_or_default().to_string();
            if failed.contains(&m.message_id().unwrap_or_default()) {
                retried.push(body);
            } else {
                let receipt = m.receipt_handle().unwrap_or_default();
                self.sqs.delete_message().queue_url(&queue.url).receipt_handle(receipt).send().await.expect("delete");
                handled.push(body);
            }
        }
        (handled, retried)
    }
}
