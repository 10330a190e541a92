//! The config's home: one SSM parameter (Advanced tier, up to 8 KB), read by the functions
//! and the forwarder, written by `ballast config push`.

use async_trait::async_trait;
use aws_sdk_ssm::types::{ParameterTier, ParameterType};
use ballast_core::ports::{newest_before, ConfigHome, ConfigText, ErrorKind, PortError};

use crate::classify;

/// A parameter's text and the version Parameter Store gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParameterVersion {
    /// The parameter's value.
    pub text: String,
    /// Parameter Store's version number, counting from 1.
    pub version: i64,
    /// When this version was written.
    pub modified: Option<chrono::DateTime<chrono::Utc>>,
}

fn modified(p: &aws_sdk_ssm::types::Parameter) -> Option<chrono::DateTime<chrono::Utc>> {
    p.last_modified_date().and_then(|d| chrono::DateTime::from_timestamp(d.secs(), d.subsec_nanos()))
}

/// Reads the parameter and its version. A parameter that does not exist yet is a
/// permanent error that says how to create it.
pub async fn read(client: &aws_sdk_ssm::Client, name: &str) -> Result<ParameterVersion, PortError> {
    let out = match client.get_parameter().name(name).with_decryption(true).send().await {
        Ok(out) => out,
        Err(e) if e.as_service_error().is_some_and(|s| s.is_parameter_not_found()) => {
            return Err(PortError::new(
                ErrorKind::Permanent,
                "GetParameter",
                format!("there is no config at {name} yet: write one with `ballast config push ballast.yaml`"),
            ))
        }
        Err(e) => return Err(classify("GetParameter", e)),
    };
    let parameter = out.parameter().ok_or_else(|| {
        PortError::new(ErrorKind::Retryable, "GetParameter", format!("the answer for {name} holds no parameter"))
    })?;
    Ok(ParameterVersion {
        text: parameter.value().unwrap_or_default().to_string(),
        version: parameter.version(),
        modified: modified(parameter),
    })
}

/// Reads the parameter, or `None` when it does not exist yet.
pub async fn read_if_any(client: &aws_sdk_ssm::Client, name: &str) -> Result<Option<ParameterVersion>, PortError> {
    match client.get_parameter().name(name).with_decryption(true).send().await {
        Ok(out) => Ok(out.parameter().map(|p| ParameterVersion {
            text: p.value().unwrap_or_default().to_string(),
            version: p.version(),
            modified: modified(p),
        })),
        Err(e) if e.as_service_error().is_some_and(|s| s.is_parameter_not_found()) => Ok(None),
        Err(e) => Err(classify("GetParameter", e)),
    }
}

/// Every version Parameter Store keeps of the parameter (its last 100), in its order.
pub async fn history(client: &aws_sdk_ssm::Client, name: &str) -> Result<Vec<ConfigText>, PortError> {
    let mut versions = Vec::new();
    let mut pages = client.get_parameter_history().name(name).with_decryption(true).into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| classify("GetParameterHistory", e))?;
        versions.extend(
            page.parameters()
                .iter()
                .map(|p| ConfigText { text: p.value().unwrap_or_default().to_string(), version: Some(p.version()) }),
        );
    }
    Ok(versions)
}

/// Writes a new version in the Advanced tier (a config may pass the Standard tier's 4 KB)
/// and returns its number.
pub async fn write(client: &aws_sdk_ssm::Client, name: &str, text: &str) -> Result<i64, PortError> {
    let out = client
        .put_parameter()
        .name(name)
        .value(text)
        .r#type(ParameterType::String)
        .tier(ParameterTier::Advanced)
        .overwrite(true)
        .description("Ballast's config (ballast.yaml), written by `ballast config push`")
        .send()
        .await
        .map_err(|e| classify("PutParameter", e))?;
    Ok(out.version())
}

/// The text only, for callers that do not follow versions.
pub async fn parameter(conf: &aws_config::SdkConfig, name: &str) -> Result<String, PortError> {
    Ok(read(&aws_sdk_ssm::Client::new(conf), name).await?.text)
}

/// The functions' and the forwarder's config home: the SSM parameter `name`.
pub struct ParameterHome {
    client: aws_sdk_ssm::Client,
    name: String,
}

impl ParameterHome {
    /// A client made from the shared SDK config, for the parameter `name`.
    pub fn new(conf: &aws_config::SdkConfig, name: impl Into<String>) -> Self {
        ParameterHome { client: aws_sdk_ssm::Client::new(conf), name: name.into() }
    }
}

#[async_trait]
impl ConfigHome for ParameterHome {
    async fn read(&self) -> Result<ConfigText, PortError> {
        let p = read(&self.client, &self.name).await?;
        Ok(ConfigText { text: p.text, version: Some(p.version) })
    }

    fn describe(&self) -> String {
        format!("SSM parameter {}", self.name)
    }

    fn changes(&self) -> bool {
        true
    }

    async fn earlier(&self, before: i64, at_most: usize) -> Result<Vec<ConfigText>, PortError> {
        Ok(newest_before(history(&self.client, &self.name).await?, before, at_most))
    }
}
