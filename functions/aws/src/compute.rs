//! The compute port over EC2: node names and spot prices.

use async_trait::async_trait;
use aws_sdk_ec2::types::{Instance, InstanceType};
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
