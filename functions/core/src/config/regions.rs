//! The AWS regions a deployment may name, by partition, and where a private ECR mirror
//! of the pause image may live: checked offline so `config check` refuses a typo
//! (`eu-wst-1`) instead of the deploy failing on it.

/// Every AWS region as of this release, by partition. A region opened later needs a
/// newer Ballast (its name is refused until then, with this list's nearest).
pub const REGIONS: &[(&str, Partition)] = &[
    ("af-south-1", Partition::Aws),
    ("ap-east-1", Partition::Aws),
    ("ap-east-2", Partition::Aws),
    ("ap-northeast-1", Partition::Aws),
    ("ap-northeast-2", Partition::Aws),
    ("ap-northeast-3", Partition::Aws),
    ("ap-south-1", Partition::Aws),
    ("ap-south-2", Partition::Aws),
    ("ap-southeast-1", Partition::Aws),
    ("ap-southeast-2", Partition::Aws),
    ("ap-southeast-3", Partition::Aws),
    ("ap-southeast-4", Partition::Aws),
    ("ap-southeast-5", Partition::Aws),
    ("ap-southeast-6", Partition::Aws),
    ("ap-southeast-7", Partition::Aws),
    ("ca-central-1", Partition::Aws),
    ("ca-west-1", Partition::Aws),
    ("eu-central-1", Partition::Aws),
    ("eu-central-2", Partition::Aws),
    ("eu-north-1", Partition::Aws),
    ("eu-south-1", Partition::Aws),
    ("eu-south-2", Partition::Aws),
    ("eu-west-1", Partition::Aws),
    ("eu-west-2", Partition::Aws),
    ("eu-west-3", Partition::Aws),
    ("il-central-1", Partition::Aws),
    ("me-central-1", Partition::Aws),
    ("me-south-1", Partition::Aws),
    ("mx-central-1", Partition::Aws),
    ("sa-east-1", Partition::Aws),
    ("us-east-1", Partition::Aws),
    ("us-east-2", Partition::Aws),
    ("us-west-1", Partition::Aws),
    ("us-west-2", Partition::Aws),
    ("cn-north-1", Partition::China),
    ("cn-northwest-1", Partition::China),
    ("us-gov-east-1", Partition::GovCloud),
    ("us-gov-west-1", Partition::GovCloud),
    ("us-iso-east-1", Partition::Iso),
    ("us-iso-west-1", Partition::Iso),
    ("us-isob-east-1", Partition::IsoB),
    ("us-isof-east-1", Partition::IsoF),
    ("us-isof-south-1", Partition::IsoF),
    ("eu-isoe-west-1", Partition::IsoE),
    ("eusc-de-east-1", Partition::EuropeanSovereign),
];

/// The regions whose ECR has a FIPS endpoint (`ACCOUNT.dkr.ecr-fips.REGION.amazonaws.com`).
const ECR_FIPS_REGIONS: [&str; 6] =
    ["us-east-1", "us-east-2", "us-west-1", "us-west-2", "us-gov-east-1", "us-gov-west-1"];

/// An AWS partition: credentials, and so image pulls, do not cross one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partition {
    /// `aws`: the commercial regions.
    Aws,
    /// `aws-cn`: Beijing and Ningxia.
    China,
    /// `aws-us-gov`: AWS GovCloud (US).
    GovCloud,
    /// `aws-iso`.
    Iso,
    /// `aws-iso-b`.
    IsoB,
    /// `aws-iso-f`.
    IsoF,
    /// `aws-iso-e`.
    IsoE,
    /// `aws-eusc`: the AWS European Sovereign Cloud.
    EuropeanSovereign,
}

impl Partition {
    /// The DNS suffix of the partition's service endpoints (ECR's among them).
    pub fn dns_suffix(self) -> &'static str {
        match self {
            Partition::Aws | Partition::GovCloud => "amazonaws.com",
            Partition::China => "amazonaws.com.cn",
            Partition::Iso => "c2s.ic.gov",
            Partition::IsoB => "sc2s.sgov.gov",
            Partition::IsoF => "csp.hci.ic.gov",
            Partition::IsoE => "cloud.adc-e.uk",
            Partition::EuropeanSovereign => "amazonaws.eu",
        }
    }

    /// The partition's name, as in an ARN.
    pub fn name(self) -> &'static str {
        match self {
            Partition::Aws => "aws",
            Partition::China => "aws-cn",
            Partition::GovCloud => "aws-us-gov",
            Partition::Iso => "aws-iso",
            Partition::IsoB => "aws-iso-b",
            Partition::IsoF => "aws-iso-f",
            Partition::IsoE => "aws-iso-e",
            Partition::EuropeanSovereign => "aws-eusc",
        }
    }
}

/// The partition of `region`, if it is a known region.
pub fn partition(region: &str) -> Option<Partition> {
    REGIONS.iter().find(|(name, _)| *name == region).map(|(_, p)| *p)
}

/// Why `region` is not a region: unknown, with the nearest known name when it looks like
/// a typo.
pub fn region_mistake(region: &str) -> Option<String> {
    if partition(region).is_some() {
        return None;
    }
    let names: Vec<&str> = REGIONS.iter().map(|(name, _)| *name).collect();
    // Two edits: a typo, not another region that shares a word.
    Some(match super::walk::nearest_within(region, &names, 2) {
        Some(near) => format!("`{region}` is not an AWS region; did you mean `{near}`?"),
        None => format!(
            "`{region}` is not an AWS region (e.g. `eu-west-1`, `us-east-1`, `cn-north-1`, `us-gov-west-1`); \
             a region opened after this release needs a newer Ballast"
        ),
    })
}

/// A private ECR repository host, `ACCOUNT.dkr.ecr[-fips].REGION.SUFFIX`: its region, if
/// the host is one, and whether it is a FIPS endpoint.
pub fn ecr_host(host: &str) -> Option<EcrHost<'_>> {
    let (account, rest) = host.split_once('.')?;
    if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (fips, rest) = if let Some(rest) = rest.strip_prefix("dkr.ecr.") {
        (false, rest)
    } else {
        (true, rest.strip_prefix("dkr.ecr-fips.")?)
    };
    let (region, suffix) = rest.split_once('.')?;
    Some(EcrHost { region, suffix, fips })
}

/// A private ECR host, split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EcrHost<'a> {
    /// Its region.
    pub region: &'a str,
    /// Its DNS suffix (`amazonaws.com`, `amazonaws.com.cn`, ...).
    pub suffix: &'a str,
    /// A FIPS endpoint (`dkr.ecr-fips`).
    pub fips: bool,
}

impl EcrHost<'_> {
    /// Why this host cannot serve images: an unknown region, a DNS suffix not of the
    /// region's partition, or a FIPS endpoint the region does not have.
    pub fn mistake(&self) -> Option<String> {
        let Some(partition) = partition(self.region) else {
            return region_mistake(self.region).map(|why| format!("the ECR mirror's region: {why}"));
        };
        if self.suffix != partition.dns_suffix() {
            return Some(format!("ECR in {} is at `.{}`, not `.{}`", self.region, partition.dns_suffix(), self.suffix));
        }
        if self.fips && !ECR_FIPS_REGIONS.contains(&self.region) {
            return Some(format!(
                "ECR has no FIPS endpoint in {} (it has in {}); use `dkr.ecr.`",
                self.region,
                ECR_FIPS_REGIONS.join(", ")
            ));
        }
        None
    }
}

/// The longest cluster name the templates take: every resource is named
/// `ballast-CLUSTER-...`, `ballast-CLUSTER-launch-unsuccessful` (an EventBridge rule, at most
/// 64 characters) the longest (infra/sam/template.yaml's `ClusterName` pattern, and CDK's).
pub const MAX_CLUSTER_NAME: usize = 36;

/// Why the templates would refuse `cluster` as the `ClusterName` every resource is named
/// from: 1 to [`MAX_CLUSTER_NAME`] letters, digits or hyphens, starting with a letter or digit.
pub fn cluster_name_mistake(cluster: &str) -> Option<String> {
    let chars = cluster.chars().count();
    if cluster.trim().is_empty() {
        Some("must not be empty".to_string())
    } else if chars > MAX_CLUSTER_NAME {
        Some(format!(
            "`{cluster}` has {chars} characters, more than the {MAX_CLUSTER_NAME} the templates take: every resource is \
             named from it and `ballast-{cluster}-launch-unsuccessful` would pass the 64 AWS allows an EventBridge rule"
        ))
    } else if !cluster.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') || cluster.starts_with('-') {
        Some(format!(
            "`{cluster}` must be letters, digits and hyphens, starting with a letter or digit (the templates' rule, as it \
             names AWS resources)"
        ))
    } else {
        None
    }
}
