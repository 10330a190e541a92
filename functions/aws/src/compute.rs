//! The compute port over EC2: node names and spot prices.

use async_trait::async_trait;
use aws_sdk_ec2::types::InstanceType;
use ballast_core::ports::{Compute, PortError};

use crate::classify;

#[derive(Debug, Clone)]
pub struct AwsCompute {
    ec2: aws_sdk_ec2::Client,
}

impl AwsCompute {
    pub fn new(conf: &aws_config::SdkConfig) -> Self {
        AwsCompute { ec2: aws_sdk_ec2::Client::new(conf) }
    }
}

#[async_trait]
impl Compute for AwsCompute {
    async fn private_dns_names(&self, instance_ids: &[String]) -> Result<Vec<(String, String)>, PortError> {
        let mut names = Vec::new();
        for chunk in instance_ids.chunks(100) {
            let mut pages =
                self.ec2.describe_instances().set_instance_ids(Some(chunk.to_vec())).into_paginator().send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| classify("DescribeInstances", e))?;
                for instance in page.reservations().iter().flat_map(|r| r.instances()) {
                    if let (Some(id), Some(dns)) = (instance.instance_id(), instance.private_dns_name()) {
                        if !dns.is_empty() {
                            names.push((id.to_string(), dns.to_string()));
                        }
                    }
                }
            }
        }
        Ok(names)
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
