//! The EKS bearer token: a presigned STS `GetCallerIdentity` URL whose signature
//! covers the `x-k8s-aws-id` header (the cluster's name), base64url without padding,
//! prefixed `k8s-aws-v1.` — what `aws eks get-token` and aws-iam-authenticator make.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings};
use aws_sigv4::sign::v4;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

/// The presigned URL is valid this long; EKS accepts the token for 15 minutes after
/// its signing time regardless.
const PRESIGN_EXPIRES: Duration = Duration::from_secs(60);
/// EKS rejects a token 15 minutes after it was signed; refresh well before.
pub const REFRESH_AFTER: Duration = Duration::from_secs(10 * 60);

/// A bearer token for the EKS API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EksToken {
    /// `k8s-aws-v1.` and the presigned URL in base64url: the `Authorization: Bearer` value.
    pub token: String,
    /// When to make a new one (well before EKS stops accepting this one).
    pub refresh_at: SystemTime,
}

impl EksToken {
    /// Whether it may still be used at `now`.
    pub fn is_fresh(&self, now: SystemTime) -> bool {
        now < self.refresh_at
    }
}

/// Why no token could be made.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// SigV4 refused to sign the request.
    #[error("cannot sign the STS request for cluster {cluster}: {reason}")]
    Sign {
        /// The cluster the token was for.
        cluster: String,
        /// The signer's error.
        reason: String,
    },
}

/// A token for `cluster` in `region`, signed with `credentials` at `now`.
pub fn eks_token(
    cluster: &str,
    region: &str,
    credentials: &Credentials,
    now: SystemTime,
) -> Result<EksToken, TokenError> {
    let fail = |reason: String| TokenError::Sign { cluster: cluster.to_string(), reason };
    let identity = credentials.clone().into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(PRESIGN_EXPIRES);
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| fail(e.to_string()))?
        .into();
    let url = format!("https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15");
    let signable =
        SignableRequest::new("GET", &url, std::iter::once(("x-k8s-aws-id", cluster)), SignableBody::Bytes(&[]))
            .map_err(|e| fail(e.to_string()))?;
    let (instructions, _signature) = sign(signable, &params).map_err(|e| fail(e.to_string()))?.into_parts();
    let mut request = http::Request::builder().uri(&url).body(()).map_err(|e| fail(e.to_string()))?;
    instructions.apply_to_request_http1x(&mut request);
    let presigned = request.uri().to_string();
    Ok(EksToken { token: format!("k8s-aws-v1.{}", URL_SAFE_NO_PAD.encode(presigned)), refresh_at: now + REFRESH_AFTER })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed() -> (Credentials, SystemTime) {
        let credentials =
            Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None, None, "test");
        // 2026-11-20T09:12:04Z
        (credentials, SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_165_924))
    }

    fn decode(token: &str) -> String {
        let body = token.strip_prefix("k8s-aws-v1.").expect("the k8s-aws-v1. prefix");
        assert!(!body.contains('=') && !body.contains('+') && !body.contains('/'), "base64url without padding");
        String::from_utf8(URL_SAFE_NO_PAD.decode(body).expect("base64url")).expect("a URL")
    }

    #[test]
    fn token_matches_botocore_exactly() {
        // Computed with botocore's SigV4QueryAuth (what aws-iam-authenticator does) for
        // the same credentials, region, cluster and time: an independent reference.
        let reference = "k8s-aws-v1.aHR0cHM6Ly9zdHMuZXUtd2VzdC0xLmFtYXpvbmF3cy5jb20vP0FjdGlvbj1HZXRDYWxsZXJJZGVudGl0eSZWZXJzaW9uPTIwMTEtMDYtMTUmWC1BbXotQWxnb3JpdGhtPUFXUzQtSE1BQy1TSEEyNTYmWC1BbXotQ3JlZGVudGlhbD1BS0lERVhBTVBMRSUyRjIwMjYxMTIwJTJGZXUtd2VzdC0xJTJGc3RzJTJGYXdzNF9yZXF1ZXN0JlgtQW16LURhdGU9MjAyNjExMjBUMDkxMjA0WiZYLUFtei1FeHBpcmVzPTYwJlgtQW16LVNpZ25lZEhlYWRlcnM9aG9zdCUzQngtazhzLWF3cy1pZCZYLUFtei1TaWduYXR1cmU9YzQ0ODg1YjVjMDE5ODMzN2U5MmFkY2VjYTUwNTQwMjljOGVlY2JiYjUyNDI5OWNhZTg1OWE1Njg1NThjMzk5OQ";
        let (credentials, now) = fixed();
        let token = eks_token("prod-eks", "eu-west-1", &credentials, now).unwrap();
        let ours = decode(&token.token);
        let theirs = decode(reference);
        let params = |url: &str| {
            let mut p: Vec<String> = url.split_once('?').unwrap().1.split('&').map(str::to_string).collect();
            p.sort();
            p
        };
        assert_eq!(ours.split_once('?').unwrap().0, "https://sts.eu-west-1.amazonaws.com/", "host and path");
        assert_eq!(params(&ours), params(&theirs), "same query parameters, same signature");
    }

    #[test]
    fn url_parts_are_as_eks_expects() {
        let (credentials, now) = fixed();
        let url = decode(&eks_token("prod-eks", "eu-west-1", &credentials, now).unwrap().token);
        for part in [
            "Action=GetCallerIdentity",
            "Version=2011-06-15",
            "X-Amz-Algorithm=AWS4-HMAC-SHA256",
            "X-Amz-Credential=AKIDEXAMPLE%2F20261120%2Feu-west-1%2Fsts%2Faws4_request",
            "X-Amz-Date=20261120T091204Z",
            "X-Amz-Expires=60",
            "X-Amz-SignedHeaders=host%3Bx-k8s-aws-id",
        ] {
            assert!(url.contains(part), "{part} missing from {url}");
        }
        let signature = url.split("X-Amz-Signature=").nth(1).unwrap();
        assert_eq!(signature.len(), 64);
        assert!(signature.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn session_token_is_signed_in_and_refresh_is_well_before_expiry() {
        let (_, now) = fixed();
        let credentials = Credentials::new("AKID", "secret", Some("session/token+=".into()), None, "test");
        let token = eks_token("c", "us-east-1", &credentials, now).unwrap();
        let url = decode(&token.token);
        assert!(url.contains("X-Amz-Security-Token=session%2Ftoken%2B%3D"), "{url}");
        assert!(url.starts_with("https://sts.us-east-1.amazonaws.com/"));
        assert!(token.is_fresh(now + Duration::from_secs(9 * 60)));
        assert!(!token.is_fresh(now + Duration::from_secs(10 * 60)), "refreshed 5 minutes before EKS's 15");
        let other = eks_token("other-cluster", "us-east-1", &credentials, now).unwrap();
        assert_ne!(token.token, other.token, "the cluster name is signed in");
    }
}
