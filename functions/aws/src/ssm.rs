//! The config as an SSM parameter (read once, at start).

use ballast_core::ports::{ErrorKind, PortError};

use crate::classify;

pub async fn parameter(conf: &aws_config::SdkConfig, name: &str) -> Result<String, PortError> {
    let out = aws_sdk_ssm::Client::new(conf)
        .get_parameter()
        .name(name)
        .with_decryption(true)
        .send()
        .await
        .map_err(|e| classify("GetParameter", e))?;
    out.parameter()
        .and_then(|p| p.value())
        .map(str::to_string)
        .ok_or_else(|| PortError::new(ErrorKind::Permanent, "GetParameter", format!("parameter {name} has no value")))
}
