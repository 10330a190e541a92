//! The EKS cluster as the functions see it: endpoint and certificate authority.

use ballast_core::ports::{ErrorKind, PortError};

use crate::classify;

/// What DescribeCluster says of the cluster the functions reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The cluster's name, as asked for.
    pub name: String,
    /// The API server's URL (empty if EKS gave none).
    pub endpoint: String,
    /// Base64 PEM, as EKS returns it.
    pub certificate_authority: String,
    /// EKS's status, such as `ACTIVE` or `CREATING`.
    pub status: String,
}

/// DescribeCluster for `name`: its endpoint, CA and status.
pub async fn describe_cluster(client: &aws_sdk_eks::Client, name: &str) -> Result<ClusterInfo, PortError> {
    let out = client.describe_cluster().name(name).send().await.map_err(|e| classify("DescribeCluster", e))?;
    let cluster = out.cluster().ok_or_else(|| {
        PortError::new(ErrorKind::Permanent, "DescribeCluster", format!("cluster {name}: no description returned"))
    })?;
    Ok(ClusterInfo {
        name: name.to_string(),
        endpoint: cluster.endpoint().unwrap_or_default().to_string(),
        certificate_authority: cluster.certificate_authority().and_then(|c| c.data()).unwrap_or_default().to_string(),
        status: cluster.status().map(|s| s.as_str().to_string()).unwrap_or_default(),
    })
}
