//! How the functions reach the API server: an EKS endpoint with its CA and a bearer
//! token made from the function's AWS credentials (made again well before it expires),
//! or a ready kube config (a kubeconfig in development, the tests' API server).

use std::time::{Duration, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use kube::config::AuthInfo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use tokio::sync::Mutex;

use crate::token::{eks_token, TokenError};

/// Why no client to the API server could be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// DescribeCluster's endpoint does not parse.
    #[error("the EKS endpoint {endpoint:?} is not a URL: {reason}")]
    Endpoint {
        /// The endpoint as given.
        endpoint: String,
        /// The parser's complaint.
        reason: String,
    },
    /// The CA data is not base64, not PEM, or holds no certificate.
    #[error("the cluster's certificate authority data is not {what}")]
    CertificateAuthority {
        /// What it failed to be.
        what: &'static str,
    },
    /// The function's credentials could not be had.
    #[error("no AWS credentials for the EKS token: {0}")]
    Credentials(#[source] aws_credential_types::provider::error::CredentialsError),
    /// The EKS token could not be signed.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// kube refused the client's config.
    #[error("cannot build the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// The kubeconfig is missing or unreadable.
    #[error("cannot read the kubeconfig: {0}")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
}

/// What DescribeCluster says about the cluster.
#[derive(Debug, Clone)]
pub struct EksEndpoint {
    /// The cluster's name, which the token is for.
    pub cluster: String,
    /// The cluster's region, where the token is signed.
    pub region: String,
    /// The API server's URL.
    pub endpoint: String,
    /// Base64 of the PEM bundle, as DescribeCluster returns it.
    pub certificate_authority: String,
}

struct Cached {
    client: kube::Client,
    refresh_at: SystemTime,
}

/// A client to an EKS cluster, made again with a fresh token before the last one expires.
pub struct EksConnector {
    base: kube::Config,
    cluster: String,
    region: String,
    credentials: SharedCredentialsProvider,
    current: Mutex<Option<Cached>>,
}

/// How the functions reach the API server.
pub enum Connector {
    /// One client, its credentials in its config (a kubeconfig, the tests' server).
    Fixed(kube::Client),
    /// EKS, with a bearer token from the function's AWS credentials.
    Eks(Box<EksConnector>),
}

/// The bounds of one Kubernetes call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubeTimeouts {
    /// Establishing the connection (TCP and TLS).
    pub connect: Duration,
    /// The longest wait for the next bytes of a response (a server that accepted the
    /// request and never answers fails here).
    pub read: Duration,
    /// The longest wait to send the request.
    pub write: Duration,
}

/// The functions' bounds. No call starts within the reconcile's `DEADLINE_MARGIN` (10 s)
/// of the invocation's deadline, so a call that hangs fails (retryable) within 8 s,
/// before the deadline, and the run ends by its error with its plan logged instead of
/// being killed mid-plan. The API server answers Ballast's gets, pages of lists and
/// evictions within a second; a drain's own time is its loop's, not one call's.
pub const KUBE_TIMEOUTS: KubeTimeouts =
    KubeTimeouts { connect: Duration::from_secs(3), read: Duration::from_secs(8), write: Duration::from_secs(8) };

/// Every call bounded by `timeouts`; every write fails fast and is classified by
/// Ballast: kube's default 429 retry would hold an eviction a PodDisruptionBudget blocks
/// for minutes.
pub fn tune(mut config: kube::Config, timeouts: KubeTimeouts) -> kube::Config {
    config.default_retry = false;
    config.connect_timeout = Some(timeouts.connect);
    config.read_timeout = Some(timeouts.read);
    config.write_timeout = Some(timeouts.write);
    config
}

impl Connector {
    /// One client from `config`, each call bounded by the deadline margin's timeouts.
    pub fn fixed(config: kube::Config) -> Result<Connector, ConnectError> {
        Connector::fixed_with(config, KUBE_TIMEOUTS)
    }

    /// As [`Connector::fixed`], each call bounded by `timeouts` (tests' shorter ones).
    pub fn fixed_with(config: kube::Config, timeouts: KubeTimeouts) -> Result<Connector, ConnectError> {
        Ok(Connector::Fixed(kube::Client::try_from(tune(config, timeouts)).map_err(ConnectError::Client)?))
    }

    /// From `KUBECONFIG` or `~/.kube/config`, for development.
    pub async fn kubeconfig() -> Result<Connector, ConnectError> {
        let config = kube::Config::from_kubeconfig(&Default::default()).await.map_err(ConnectError::Kubeconfig)?;
        Connector::fixed(config)
    }

    /// EKS at `endpoint`, signing its tokens with `credentials`.
    pub fn eks(endpoint: EksEndpoint, credentials: SharedCredentialsProvider) -> Result<Connector, ConnectError> {
        let uri: http::Uri = endpoint.endpoint.parse().map_err(|e: http::uri::InvalidUri| ConnectError::Endpoint {
            endpoint: endpoint.endpoint.clone(),
            reason: e.to_string(),
        })?;
        let mut base = tune(kube::Config::new(uri), KUBE_TIMEOUTS);
        base.root_cert = Some(ca_certificates(&endpoint.certificate_authority)?);
        Ok(Connector::Eks(Box::new(EksConnector {
            base,
            cluster: endpoint.cluster,
            region: endpoint.region,
            credentials,
            current: Mutex::new(None),
        })))
    }

    /// A client whose credentials are good for at least the next few minutes.
    pub async fn client(&self) -> Result<kube::Client, ConnectError> {
        match self {
            Connector::Fixed(client) => Ok(client.clone()),
            Connector::Eks(eks) => eks.client(SystemTime::now()).await,
        }
    }
}

impl EksConnector {
    async fn client(&self, now: SystemTime) -> Result<kube::Client, ConnectError> {
        let mut current = self.current.lock().await;
        if let Some(cached) = current.as_ref().filter(|c| now < c.refresh_at) {
            return Ok(cached.client.clone());
        }
        let credentials = self.credentials.provide_credentials().await.map_err(ConnectError::Credentials)?;
        let token = eks_token(&self.cluster, &self.region, &credentials, now)?;
        let mut config = self.base.clone();
        config.auth_info = AuthInfo { token: Some(token.token.into()), ..Default::default() };
        let client = kube::Client::try_from(config).map_err(ConnectError::Client)?;
        *current = Some(Cached { client: client.clone(), refresh_at: token.refresh_at });
        Ok(client)
    }
}

/// DER certificates from DescribeCluster's base64 PEM bundle.
pub fn ca_certificates(base64_pem: &str) -> Result<Vec<Vec<u8>>, ConnectError> {
    let pem = STANDARD.decode(base64_pem.trim()).map_err(|_| ConnectError::CertificateAuthority { what: "base64" })?;
    let certs: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(&pem)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<_, _>>()
        .map_err(|_| ConnectError::CertificateAuthority { what: "a PEM certificate bundle" })?;
    if certs.is_empty() {
        return Err(ConnectError::CertificateAuthority { what: "a PEM certificate bundle (no certificate in it)" });
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_is_bounded_within_the_deadline_margin() {
        let margin = ballast_core::reconcile::DEADLINE_MARGIN.to_std().unwrap();
        let config = tune(kube::Config::new("https://example.invalid".parse().unwrap()), KUBE_TIMEOUTS);
        assert_eq!(config.connect_timeout, Some(Duration::from_secs(3)));
        assert_eq!(config.read_timeout, Some(Duration::from_secs(8)));
        assert_eq!(config.write_timeout, Some(Duration::from_secs(8)));
        assert!(!config.default_retry);
        for bound in [config.connect_timeout, config.read_timeout, config.write_timeout] {
            assert!(bound.is_some_and(|b| b < margin), "{bound:?} against a margin of {margin:?}");
        }
        let Connector::Eks(eks) = Connector::eks(
            EksEndpoint {
                cluster: "c".into(),
                region: "eu-west-1".into(),
                endpoint: "https://ABCDEF.gr7.eu-west-1.eks.amazonaws.com".into(),
                certificate_authority: STANDARD.encode(CA_PEM),
            },
            SharedCredentialsProvider::new(aws_credential_types::Credentials::new("AKID", "s", None, None, "t")),
        )
        .expect("connector") else {
            panic!("an EKS connector")
        };
        assert_eq!(eks.base.read_timeout, Some(Duration::from_secs(8)), "the EKS connection is bounded too");
    }

    #[test]
    fn bad_certificate_data_says_what_is_wrong() {
        let err = |s: &str| ca_certificates(s).unwrap_err().to_string();
        assert!(err("not base64!").ends_with("not base64"));
        assert!(err(&STANDARD.encode("hello")).contains("no certificate in it"));
    }

    /// A self-signed certificate, as DescribeCluster would return a cluster CA.
    const CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBgzCCASmgAwIBAgIUSMWqO5mSinFQq0d37ZdLTP7WZ4owCgYIKoZIzj0EAwIw
FzEVMBMGA1UEAwwMYmFsbGFzdC10ZXN0MB4XDTI2MTEyMTA5Mjc1OFoXDTM2MTEx
ODA5Mjc1OFowFzEVMBMGA1UEAwwMYmFsbGFzdC10ZXN0MFkwEwYHKoZIzj0CAQYI
KoZIzj0DAQcDQgAEEJB+LLV6tnLV/mzuZpNadF94wo6TsrsU1hySZQLoxeq+JSBZ
zRrIgbk3pv03TXcWbjy/925k8PzUMTONbIf27qNTMFEwHQYDVR0OBBYEFDu6WsoA
itDhHK0hWqeoHxW6NvFtMB8GA1UdIwQYMBaAFDu6WsoAitDhHK0hWqeoHxW6NvFt
MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgWsjrJSYdq5t+bN3d
KdUTHuJJBS0Qe+q34MaQNVTI8R0CIQDdQa2nMbrwnnFh0V3nuohuMu5fCPBdBvve
UEwg27houQ==
-----END CERTIFICATE-----
";

    #[derive(Debug)]
    struct Counting(std::sync::Arc<std::sync::atomic::AtomicU32>);

    impl ProvideCredentials for Counting {
        fn provide_credentials<'a>(&'a self) -> aws_credential_types::provider::future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let credentials = aws_credential_types::Credentials::new("AKID", "secret", None, None, "test");
            aws_credential_types::provider::future::ProvideCredentials::ready(Ok(credentials))
        }
    }

    #[tokio::test]
    async fn the_token_is_made_again_only_when_due() {
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let endpoint = EksEndpoint {
            cluster: "prod-eks".into(),
            region: "eu-west-1".into(),
            endpoint: "https://ABCDEF.gr7.eu-west-1.eks.amazonaws.com".into(),
            certificate_authority: STANDARD.encode(CA_PEM),
        };
        let Connector::Eks(eks) =
            Connector::eks(endpoint, SharedCredentialsProvider::new(Counting(calls.clone()))).expect("connector")
        else {
            panic!("an EKS connector")
        };
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let count = || calls.load(std::sync::atomic::Ordering::SeqCst);
        eks.client(t0).await.unwrap();
        eks.client(t0 + Duration::from_secs(9 * 60)).await.unwrap();
        assert_eq!(count(), 1, "one token for the first minutes");
        eks.client(t0 + Duration::from_secs(10 * 60)).await.unwrap();
        assert_eq!(count(), 2, "a new token at 10 minutes, well before EKS's 15");
    }

    #[test]
    fn an_endpoint_that_is_not_a_url_is_named() {
        let endpoint = EksEndpoint {
            cluster: "c".into(),
            region: "eu-west-1".into(),
            endpoint: "https://exa mple".into(),
            certificate_authority: String::new(),
        };
        let provider = SharedCredentialsProvider::new(aws_credential_types::Credentials::new(
            "AKID", "secret", None, None, "test",
        ));
        let err = Connector::eks(endpoint, provider).err().unwrap().to_string();
        assert!(err.contains("\"https://exa mple\" is not a URL"), "{err}");
    }
}
