//! The autoscaling port over Auto Scaling (and EC2 for each instance's lifecycle).

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use aws_sdk_autoscaling::types::{AutoScalingGroup, Filter, LifecycleState as SdkLifecycle, ScalingActivityStatusCode};
use ballast_core::config::{resolve_pool_asgs, AsgRef, AsgSelector, PoolConfig};
use ballast_core::observe::{
    ActivityStatus, AsgInstance, AsgSize, LaunchedBy, LifecycleState, Market, ObservedAsg, ScalingActivity,
};
use ballast_core::plan::LifecycleRef;
use ballast_core::ports::{Autoscaling, ErrorKind, PortError};
use chrono::{DateTime, Utc};
use futures_util::future::{join_all, try_join_all};

use crate::classify;

/// How many recent scaling activities a pool observation reads per spot ASG.
const ACTIVITIES: i32 = 20;
/// How many instance ids DescribeAutoScalingInstances takes in one call (and how many
/// ASG names one DescribeTags filter is given).
const INSTANCE_IDS_PER_CALL: usize = 50;

/// The [`Autoscaling`] port over the Auto Scaling API, with EC2 for what it lacks.
#[derive(Debug, Clone)]
pub struct AwsAutoscaling {
    autoscaling: aws_sdk_autoscaling::Client,
    ec2: aws_sdk_ec2::Client,
}

impl AwsAutoscaling {
    /// The Auto Scaling client, for checks beyond the port (`ballast doctor`).
    pub fn client(&self) -> &aws_sdk_autoscaling::Client {
        &self.autoscaling
    }

    /// Clients made from the shared SDK config.
    pub fn new(conf: &aws_config::SdkConfig) -> Self {
        AwsAutoscaling { autoscaling: aws_sdk_autoscaling::Client::new(conf), ec2: aws_sdk_ec2::Client::new(conf) }
    }

    /// Over clients of the caller's making (tests point them at moto or add interceptors).
    pub fn from_clients(autoscaling: aws_sdk_autoscaling::Client, ec2: aws_sdk_ec2::Client) -> Self {
        AwsAutoscaling { autoscaling, ec2 }
    }

    /// ASGs matching a selector: by name, or every ASG carrying all the tags (by name order).
    pub async fn select(&self, selector: &AsgSelector) -> Result<Vec<AutoScalingGroup>, PortError> {
        let mut request = self.autoscaling.describe_auto_scaling_groups();
        match selector {
            AsgSelector::Name(name) => request = request.auto_scaling_group_names(name),
            AsgSelector::Tags(tags) => {
                for (key, value) in tags {
                    request = request.filters(Filter::builder().name(format!("tag:{key}")).values(value).build());
                }
            }
        }
        let mut groups = Vec::new();
        let mut pages = request.into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| classify("DescribeAutoScalingGroups", e))?;
            groups.extend(page.auto_scaling_groups().iter().cloned());
        }
        // The name filter is exact in AWS; tag filters are re-checked here in case an
        // emulator ignores them.
        groups.retain(|g| selector.matches(g.auto_scaling_group_name().unwrap_or_default(), &tags_of(g)));
        groups.sort_by(|a, b| a.auto_scaling_group_name().cmp(&b.auto_scaling_group_name()));
        Ok(groups)
    }

    async fn spot_instance_ids(&self, ids: &[String]) -> Result<BTreeSet<String>, PortError> {
        Ok(crate::compute::describe_instances(&self.ec2, ids)
            .await?
            .iter()
            .filter(|i| i.instance_lifecycle().is_some_and(|l| l.as_str() == "spot"))
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect())
    }

    async fn activities(&self, asg: &str) -> Result<Vec<ScalingActivity>, PortError> {
        let out = self
            .autoscaling
            .describe_scaling_activities()
            .auto_scaling_group_name(asg)
            .max_records(ACTIVITIES)
            .send()
            .await
            .map_err(|e| classify("DescribeScalingActivities", e))?;
        Ok(out
            .activities()
            .iter()
            .filter_map(|a| {
                Some(ScalingActivity {
                    id: a.activity_id()?.to_string(),
                    status: match a.status_code()? {
                        ScalingActivityStatusCode::Successful => ActivityStatus::Successful,
                        ScalingActivityStatusCode::Failed => ActivityStatus::Failed,
                        ScalingActivityStatusCode::Cancelled => ActivityStatus::Cancelled,
                        _ => ActivityStatus::InProgress,
                    },
                    description: a.description().unwrap_or_default().to_string(),
                    status_message: a.status_message().unwrap_or_default().to_string(),
                    cause: a.cause().unwrap_or_default().to_string(),
                    start: to_chrono(a.start_time()?)?,
                    end: a.end_time().and_then(to_chrono),
                })
            })
            .collect())
    }

    async fn observe(
        &self,
        group: &AutoScalingGroup,
        role: Market,
        activities_read: Option<Result<Vec<ScalingActivity>, PortError>>,
    ) -> Result<ObservedAsg, PortError> {
        let name = group.auto_scaling_group_name().unwrap_or_default().to_string();
        let ids: Vec<String> = group.instances().iter().filter_map(|i| i.instance_id().map(str::to_string)).collect();
        let all_spot = role == Market::Spot && purchases_only_spot(group);
        let spot_ids = async {
            if role == Market::Spot && !all_spot && !ids.is_empty() {
                self.spot_instance_ids(&ids).await
            } else {
                Ok(BTreeSet::new())
            }
        };
        let activities = async {
            match activities_read {
                Some(read) => read,
                None if role == Market::Spot => self.activities(&name).await,
                None => Ok(Vec::new()),
            }
        };
        let (spot_ids, activities) = tokio::try_join!(spot_ids, activities)?;
        let instances = group
            .instances()
            .iter()
            .filter_map(|i| {
                let id = i.instance_id()?.to_string();
                let market = if all_spot || spot_ids.contains(&id) { Market::Spot } else { Market::OnDemand };
                Some(AsgInstance {
                    lifecycle_state: lifecycle(i.lifecycle_state()?),
                    availability_zone: i.availability_zone().unwrap_or_default().to_string(),
                    instance_type: i.instance_type().unwrap_or_default().to_string(),
                    market,
                    id,
                })
            })
            .collect();
        Ok(ObservedAsg {
            tags: tags_of(group),
            desired: count(group.desired_capacity()),
            min: count(group.min_size()),
            max: count(group.max_size()),
            instances,
            activities,
            name,
        })
    }
}

/// Whether the ASG's purchase options buy spot only (no on-demand above a zero base).
pub fn purchases_only_spot(group: &AutoScalingGroup) -> bool {
    group.mixed_instances_policy().and_then(|p| p.instances_distribution()).is_some_and(|d| {
        d.on_demand_base_capacity().unwrap_or(0) == 0 && d.on_demand_percentage_above_base_capacity() == Some(0)
    })
}

/// Whether the ASG can buy spot at all (some share above the on-demand base).
pub fn purchases_spot(group: &AutoScalingGroup) -> bool {
    group
        .mixed_instances_policy()
        .and_then(|p| p.instances_distribution())
        .is_some_and(|d| d.on_demand_percentage_above_base_capacity().unwrap_or(100) < 100)
}

/// An ASG's tags as key to value (a tag without a value maps to "").
pub fn tags_of(group: &AutoScalingGroup) -> BTreeMap<String, String> {
    group
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string())))
        .collect()
}

fn count(n: Option<i32>) -> u32 {
    n.unwrap_or(0).max(0) as u32
}

fn to_chrono(t: &aws_smithy_types::DateTime) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.secs(), t.subsec_nanos())
}

fn lifecycle(state: &SdkLifecycle) -> LifecycleState {
    match state {
        SdkLifecycle::Pending => LifecycleState::Pending,
        SdkLifecycle::PendingWait => LifecycleState::PendingWait,
        SdkLifecycle::PendingProceed => LifecycleState::PendingProceed,
        SdkLifecycle::InService => LifecycleState::InService,
        SdkLifecycle::Terminating => LifecycleState::Terminating,
        SdkLifecycle::TerminatingWait => LifecycleState::TerminatingWait,
        SdkLifecycle::TerminatingProceed => LifecycleState::TerminatingProceed,
        SdkLifecycle::Terminated => LifecycleState::Terminated,
        SdkLifecycle::Detaching => LifecycleState::Detaching,
        SdkLifecycle::Detached => LifecycleState::Detached,
        SdkLifecycle::EnteringStandby => LifecycleState::EnteringStandby,
        SdkLifecycle::Standby => LifecycleState::Standby,
        // Warm pools and states added later: not capacity Ballast counts.
        _ => LifecycleState::Detached,
    }
}

/// An ASG's desired size and bounds, its instances not counted.
fn size_of(group: &AutoScalingGroup) -> AsgSize {
    AsgSize {
        desired: count(group.desired_capacity()),
        min: count(group.min_size()),
        max: count(group.max_size()),
        live: None,
    }
}

#[async_trait]
impl Autoscaling for AwsAutoscaling {
    async fn describe_pool(&self, pool: &PoolConfig) -> Result<(Vec<ObservedAsg>, Option<ObservedAsg>), PortError> {
        // Each selector is one listing (AWS filters by name or tags); the pool is then
        // resolved against all of them with the shared rule. Listings, then the ASGs'
        // own reads, are made together: a spot warning's first call waits on them.
        let selectors = pool.spot_asgs.iter().chain(pool.on_demand_asg.as_ref());
        // A spot ASG named in the config has its activities read beside the listings (their
        // failure counts only if the ASG is listed: a missing one fails as not found).
        let named_spot = pool.spot_asgs.iter().filter_map(|s| match s {
            AsgSelector::Name(name) => Some(name.as_str()),
            AsgSelector::Tags(_) => None,
        });
        let prefetch = join_all(named_spot.map(|name| async move { (name.to_string(), self.activities(name).await) }));
        let (listings, prefetched) = tokio::join!(try_join_all(selectors.map(|s| self.select(s))), prefetch);
        let listings = listings?;
        let mut prefetched: BTreeMap<String, Result<Vec<ScalingActivity>, PortError>> =
            prefetched.into_iter().collect();
        let mut listed: BTreeMap<String, (AutoScalingGroup, BTreeMap<String, String>)> = BTreeMap::new();
        for group in listings.into_iter().flatten() {
            let name = group.auto_scaling_group_name().unwrap_or_default().to_string();
            let tags = tags_of(&group);
            listed.insert(name, (group, tags));
        }
        let resolved = resolve_pool_asgs(pool, listed.iter().map(|(name, (_, tags))| AsgRef { name, tags }))
            .map_err(|e| PortError::new(ErrorKind::Permanent, "DescribeAutoScalingGroups", e.to_string()))?;
        let spot_reads: Vec<(&str, _)> = resolved.spot.iter().map(|name| (*name, prefetched.remove(*name))).collect();
        let spot =
            try_join_all(spot_reads.into_iter().map(|(name, read)| self.observe(&listed[name].0, Market::Spot, read)));
        let on_demand = async {
            match resolved.on_demand {
                Some(name) => self.observe(&listed[name].0, Market::OnDemand, None).await.map(Some),
                None => Ok(None),
            }
        };
        tokio::try_join!(spot, on_demand)
    }

    async fn asgs_of_instances(&self, instance_ids: &[String]) -> Result<BTreeMap<String, String>, PortError> {
        let mut found = BTreeMap::new();
        // Without ids the call would describe every instance in the account; AWS takes
        // at most 50 a call.
        for chunk in instance_ids.chunks(INSTANCE_IDS_PER_CALL) {
            let mut pages = self
                .autoscaling
                .describe_auto_scaling_instances()
                .set_instance_ids(Some(chunk.to_vec()))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| classify("DescribeAutoScalingInstances", e))?;
                for instance in page.auto_scaling_instances() {
                    if let (Some(id), Some(asg)) = (instance.instance_id(), instance.auto_scaling_group_name()) {
                        found.insert(id.to_string(), asg.to_string());
                    }
                }
            }
        }
        Ok(found)
    }

    async fn launched_by(&self, instance_ids: &[String]) -> Result<BTreeMap<String, LaunchedBy>, PortError> {
        crate::compute::launched_by(&self.ec2, instance_ids).await
    }

    async fn asg_tags(&self, asgs: &[String]) -> Result<BTreeMap<String, BTreeMap<String, String>>, PortError> {
        let mut tags: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for chunk in asgs.chunks(INSTANCE_IDS_PER_CALL) {
            let filter = Filter::builder().name("auto-scaling-group").set_values(Some(chunk.to_vec())).build();
            // Node-group ASGs carry many tags (cluster-autoscaler's node templates): the
            // largest page AWS gives.
            let mut pages = self.autoscaling.describe_tags().filters(filter).max_records(100).into_paginator().send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| classify("DescribeTags", e))?;
                for tag in page.tags() {
                    let (Some(asg), Some(key)) = (tag.resource_id(), tag.key()) else { continue };
                    // An emulator ignoring the filter answers for every ASG.
                    if !chunk.iter().any(|name| name == asg) {
                        continue;
                    }
                    tags.entry(asg.to_string())
                        .or_default()
                        .insert(key.to_string(), tag.value().unwrap_or_default().to_string());
                }
            }
        }
        Ok(tags)
    }

    async fn asg_size(&self, asg: &str) -> Result<AsgSize, PortError> {
        let group = self.select(&AsgSelector::Name(asg.to_string())).await?.into_iter().next().ok_or_else(|| {
            PortError::new(ErrorKind::Permanent, "DescribeAutoScalingGroups", format!("ASG {asg} not found"))
        })?;
        let live =
            group.instances().iter().filter_map(|i| i.lifecycle_state()).filter(|s| lifecycle(s).is_live()).count();
        Ok(AsgSize { live: Some(live as u32), ..size_of(&group) })
    }

    async fn asg_bounds(&self, asg: &str) -> Result<AsgSize, PortError> {
        let answer = self
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(asg)
            .include_instances(false)
            .send()
            .await
            .map_err(|e| classify("DescribeAutoScalingGroups", e))?;
        let group = answer.auto_scaling_groups().iter().find(|g| g.auto_scaling_group_name() == Some(asg)).ok_or_else(
            || PortError::new(ErrorKind::Permanent, "DescribeAutoScalingGroups", format!("ASG {asg} not found")),
        )?;
        Ok(size_of(group))
    }

    async fn set_desired_capacity(&self, asg: &str, desired: u32) -> Result<(), PortError> {
        self.autoscaling
            .set_desired_capacity()
            .auto_scaling_group_name(asg)
            .desired_capacity(i32::try_from(desired).unwrap_or(i32::MAX))
            .honor_cooldown(false)
            .send()
            .await
            .map_err(|e| classify("SetDesiredCapacity", e))?;
        Ok(())
    }

    async fn terminate_instance(&self, instance_id: &str, decrement: bool) -> Result<(), PortError> {
        self.autoscaling
            .terminate_instance_in_auto_scaling_group()
            .instance_id(instance_id)
            .should_decrement_desired_capacity(decrement)
            .send()
            .await
            .map_err(|e| classify("TerminateInstanceInAutoScalingGroup", e))?;
        Ok(())
    }

    async fn record_lifecycle_heartbeat(&self, action: &LifecycleRef) -> Result<(), PortError> {
        self.autoscaling
            .record_lifecycle_action_heartbeat()
            .auto_scaling_group_name(&action.asg)
            .lifecycle_hook_name(&action.hook)
            .lifecycle_action_token(&action.token)
            .instance_id(&action.instance_id)
            .send()
            .await
            .map_err(|e| classify("RecordLifecycleActionHeartbeat", e))?;
        Ok(())
    }

    async fn complete_lifecycle_action(&self, action: &LifecycleRef) -> Result<(), PortError> {
        self.autoscaling
            .complete_lifecycle_action()
            .auto_scaling_group_name(&action.asg)
            .lifecycle_hook_name(&action.hook)
            .lifecycle_action_token(&action.token)
            .instance_id(&action.instance_id)
            .lifecycle_action_result("CONTINUE")
            .send()
            .await
            .map_err(|e| classify("CompleteLifecycleAction", e))?;
        Ok(())
    }
}
