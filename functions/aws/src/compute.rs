//! The compute port over EC2: node names and spot prices; and the EC2 reads the
//! autoscaling port makes (instances' markets, the ASG that launched an instance).

use async_trait::async_trait;
use std::collections::BTreeMap;

use aws_sdk_ec2::types::{Filter, Instance, InstanceType};
use ballast_core::observe::LaunchedBy;
use ballast_core::ports::{Compute, PortError};

use crate::classify;

/// The [`Compute`] port over the EC2 API.
#[derive(Debug, Clone)]
pub struct AwsCompute {
    ec2: aws_sdk_ec2::Client,
}

impl AwsCompute {
    /// A client made from the shared SDK config.
    pub fn new(conf: &aws_config::SdkConfig) -> Self {
        AwsCompute { ec2: aws_sdk_ec2::Client::new(conf) }
    }
}

/// Every instance among `ids`, paging through DescribeInstances 100 ids at a time.
pub(crate) async fn describe_instances(ec2: &aws_sdk_ec2::Client, ids: &[String]) -> Result<Vec<Instance>, PortError> {
    let mut instances = Vec::new();
    for chunk in ids.chunks(100) {
        let mut pages = ec2.describe_instances().set_instance_ids(Some(chunk.to_vec())).into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| classify("DescribeInstances", e))?;
            instances.extend(page.reservations().iter().flat_map(|r| r.instances()).cloned());
        }
    }
    Ok(instances)
}

/// The tag EC2 puts on every instance an ASG launches, naming the ASG.
const ASG_NAME_TAG: &str = "aws:autoscaling:groupName";
/// How EC2's state reason codes start when the spot market took the instance back.
const SPOT_RECLAIM_REASON: &str = "Server.SpotInstance";

/// What EC2 says of each instance among `ids` it knows: the ASG that launched it (its
/// `aws:autoscaling:groupName` tag) and whether the spot market took it back. Filtered
/// by id, not asked by id: DescribeInstances refuses a whole request naming one id it
/// does not know (`InvalidInstanceID.NotFound`), and one gone for over an hour is such.
pub(crate) async fn launched_by(
    ec2: &aws_sdk_ec2::Client,
    ids: &[String],
) -> Result<BTreeMap<String, LaunchedBy>, PortError> {
    let mut launched = BTreeMap::new();
    // A filter takes at most 200 values.
    for chunk in ids.chunks(200) {
        let filter = Filter::builder().name("instance-id").set_values(Some(chunk.to_vec())).build();
        let mut pages = ec2.describe_instances().filters(filter).into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| classify("DescribeInstances", e))?;
            for instance in page.reservations().iter().flat_map(|r| r.instances()) {
                // An emulator ignoring the filter answers for every instance.
                let Some(id) = instance.instance_id().filter(|id| chunk.iter().any(|c| c == id)) else { continue };
                let asg = instance
                    .tags()
                    .iter()
                    .find(|t| t.key() == Some(ASG_NAME_TAG))
                    .and_then(|t| t.value())
                    .map(str::to_string);
                // `Server.SpotInstanceTermination` (or `...Shutdown`, a stop or hibernation).
                let spot_reclaimed = instance
                    .state_reason()
                    .and_then(|r| r.code())
                    .is_some_and(|code| code.starts_with(SPOT_RECLAIM_REASON));
                launched.insert(id.to_string(), LaunchedBy { asg, spot_reclaimed });
            }
        }
    }
    Ok(launched)
}

#[async_trait]
impl Compute for AwsCompute {
    async fn private_dns_names(&self, instance_ids: &[String]) -> Result<Vec<(String, String)>, PortError> {
        Ok(describe_instances(&self.ec2, instance_ids)
            .await?
            .iter()
            .filter_map(|i| {
                Some((i.instance_id()?.to_string(), i.private_dns_name().filter(|d| !d.is_empty())?.to_string()))
            })
            .collect())
    }

    async fn spot_price(&self, instance_type: &str, availability_zone: &str) -> Result<Option<f64>, PortError> {
        let out = self
            .ec2
            .describe_spot_price_history()
            .instance_types(InstanceType::from(instance_type))
            .availability_zone(availability_zone)
            .product_descriptions("Linux/UNIX")
            .send()
            .await
            .map_err(|e| classify("DescribeSpotPriceHistory", e))?;
        // Newest first; the price is a decimal string.
        let latest = out.spot_price_history().iter().max_by_key(|p| p.timestamp().map(|t| t.secs()));
        Ok(latest.and_then(|p| p.spot_price()).and_then(|p| p.parse().ok()))
    }
}
