//! What more than one of the CLI's test files needs.

/// Nothing listens there: every call to AWS fails at once.
pub const NO_AWS: [(&str, &str); 6] = [
    ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
    ("AWS_REGION", "eu-west-1"),
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
    ("AWS_MAX_ATTEMPTS", "1"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];
