//! Ballast's AWS adapters. SDK types stay in this crate: every port speaks the
//! core's domain types, and every error says whether a retry can help.

#![warn(missing_docs)]

pub mod autoscaling;
pub mod compute;
pub mod dead_letters;
pub mod eks;
pub mod redelivery;
pub mod ssm;
pub mod state;
pub mod timeouts;

pub use autoscaling::AwsAutoscaling;
pub use ballast_aws_errors::{classify, describe, trouble, trouble_in_chain, Trouble};
pub use compute::AwsCompute;
pub use dead_letters::SqsDeadLetters;
pub use redelivery::SqsRedelivery;
pub use state::DynamoStore;
pub use timeouts::{CallTimeouts, CALL_TIMEOUTS};

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use std::path::PathBuf;

/// The SDK configuration from the environment (region, credentials, and
/// `AWS_ENDPOINT_URL` for a local emulator), with standard retries and every call
/// bounded by [`CALL_TIMEOUTS`], trusting the system's CA bundle file (see
/// [`trust_bundle`]).
pub async fn sdk_config() -> SdkConfig {
    let loader = sdk_loader(CALL_TIMEOUTS);
    match https_client(trust_bundle(std::env::var_os("SSL_CERT_FILE").map(PathBuf::from))) {
        Some(client) => loader.http_client(client).load().await,
        None => loader.load().await,
    }
}

/// The loader [`sdk_config`] starts from: standard retries (3 attempts), each call bounded
/// by `timeouts`. Tests give it their own endpoint and shorter bounds.
pub fn sdk_loader(timeouts: CallTimeouts) -> aws_config::ConfigLoader {
    aws_config::defaults(BehaviorVersion::latest())
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .timeout_config(timeouts.config())
}

/// CA bundle files, the first found wins: Amazon Linux's (the Lambda runtime's), then
/// Debian's and Alpine's.
const CA_BUNDLES: [&str; 2] = ["/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/certs/ca-certificates.crt"];

/// The CA bundle the SDK trusts: `SSL_CERT_FILE` if it names a file, else the system's
/// bundle file. One file read at start: the SDK's own native-roots loading also scans
/// the certificate directory (Debian's holds ~150 files), about 10 ms of a cold start.
pub fn trust_bundle(ssl_cert_file: Option<PathBuf>) -> Option<Vec<u8>> {
    ssl_cert_file
        .into_iter()
        .chain(CA_BUNDLES.map(PathBuf::from))
        .find(|p| p.is_file())
        .and_then(|p| std::fs::read(p).ok())
}

/// An HTTPS client trusting only `bundle`'s usable certificates (`None`: no bundle, or
/// none usable in it: the SDK's default).
pub fn https_client(bundle: Option<Vec<u8>>) -> Option<aws_smithy_runtime_api::client::http::SharedHttpClient> {
    use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
    let roots = usable_roots(&bundle?);
    if roots.is_empty() {
        return None;
    }
    let trust = TrustStore::empty().with_native_roots(false).with_pem_certificate(roots);
    let context = TlsContext::builder().with_trust_store(trust).build().ok()?;
    Some(
        aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
            .tls_context(context)
            .build_https(),
    )
}

/// The bundle's certificates rustls takes as trust anchors, as PEM. The SDK's TLS setup
/// panics on one it cannot take (where native-roots loading skips it), so a bundle with an
/// odd entry must not reach it as it is.
pub fn usable_roots(bundle: &[u8]) -> Vec<u8> {
    use base64::Engine;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let mut out = Vec::new();
    for der in CertificateDer::pem_slice_iter(bundle).flatten() {
        if rustls::RootCertStore::empty().add(der.clone()).is_err() {
            continue;
        }
        let text = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        out.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
        for line in text.as_bytes().chunks(64) {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        out.extend_from_slice(b"-----END CERTIFICATE-----\n");
    }
    out
}

#[cfg(test)]
mod trust_tests {
    use super::*;

    #[test]
    fn the_bundle_is_ssl_cert_file_when_it_names_a_file_else_the_systems() {
        let dir = std::env::temp_dir().join(format!("ballast-trust-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let own = dir.join("own.pem");
        std::fs::write(&own, b"not really a bundle").unwrap();
        assert_eq!(trust_bundle(Some(own)).as_deref(), Some(&b"not really a bundle"[..]));
        let system = CA_BUNDLES.iter().find(|p| std::path::Path::new(p).is_file()).map(|p| std::fs::read(p).unwrap());
        assert_eq!(trust_bundle(Some(dir.join("missing.pem"))), system, "a missing file falls through");
        assert_eq!(trust_bundle(Some(PathBuf::new())), system, "an empty SSL_CERT_FILE too");
        assert!(https_client(None).is_none(), "no bundle: the SDK's own default");
        assert!(https_client(Some(b"not really a bundle".to_vec())).is_none(), "nothing usable: the default too");
        assert!(system.is_some(), "this machine has a CA bundle where the functions look");
        let system = system.unwrap();
        let kept = usable_roots(&system);
        assert!(kept.len() > 100_000, "Debian's bundle is ~150 roots: {} bytes kept", kept.len());
        // An entry rustls cannot take is left out, not passed on to panic in the SDK.
        let mut odd = system.clone();
        odd.extend_from_slice(b"-----BEGIN CERTIFICATE-----\nMIIBAAAA\n-----END CERTIFICATE-----\n");
        assert_eq!(usable_roots(&odd), kept);
        assert!(https_client(Some(odd)).is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
