//! Settings parsed from an injectable source (the process environment in Lambda, a
//! map in tests): where the config comes from, the dead-letter queue, the lease owner.

use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// `BALLAST_CONFIG`: the YAML itself.
    Inline(String),
    /// `BALLAST_CONFIG_FILE`: a file packaged with the function.
    File(PathBuf),
    /// `BALLAST_CONFIG_PARAMETER`: an SSM parameter name.
    SsmParameter(String),
}

/// How the functions reach the cluster (`BALLAST_CLUSTER_ACCESS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterAccess {
    /// `eks` (default): DescribeCluster for the endpoint and CA, an EKS token from the
    /// function's role.
    Eks,
    /// `kubeconfig`: `KUBECONFIG` or `~/.kube/config`, for local runs.
    Kubeconfig,
    /// `none`: Auto Scaling only; headroom, cordon and drain are refused, demand comes
    /// only from the forwarder.
    None,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub config: ConfigSource,
    /// `BALLAST_DEAD_LETTER_QUEUE_URL`: where malformed messages go (interruption function).
    pub dead_letter_queue_url: Option<String>,
    /// `BALLAST_MAX_RECEIVES`: the events queue's `maxReceiveCount`. A message still
    /// failing on that receive is dead-lettered by the function with its errors, rather
    /// than moved there by the redrive policy with none.
    pub max_receives: Option<u32>,
    /// `BALLAST_ACCOUNT_ID`: the account events must come from when the config has none.
    pub account: Option<String>,
    /// Names this container in pool leases (`AWS_LAMBDA_LOG_STREAM_NAME`, unique per container).
    pub owner: String,
    pub cluster_access: ClusterAccess,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("no config: set one of BALLAST_CONFIG (YAML), BALLAST_CONFIG_FILE (path) or BALLAST_CONFIG_PARAMETER (SSM name)")]
    NoConfig,
    #[error("{0} are all set; set exactly one config source")]
    ManyConfigs(String),
    #[error("{name}: {reason}")]
    Invalid { name: &'static str, reason: String },
}

impl Settings {
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        let non_empty = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let sources: Vec<(&str, ConfigSource)> = [
            non_empty("BALLAST_CONFIG").map(|v| ("BALLAST_CONFIG", ConfigSource::Inline(v))),
            non_empty("BALLAST_CONFIG_FILE").map(|v| ("BALLAST_CONFIG_FILE", ConfigSource::File(v.into()))),
            non_empty("BALLAST_CONFIG_PARAMETER").map(|v| ("BALLAST_CONFIG_PARAMETER", ConfigSource::SsmParameter(v))),
        ]
        .into_iter()
        .flatten()
        .collect();
        let config = match sources.len() {
            0 => return Err(SettingsError::NoConfig),
            1 => sources.into_iter().next().map(|(_, s)| s).ok_or(SettingsError::NoConfig)?,
            _ => {
                return Err(SettingsError::ManyConfigs(sources.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")))
            }
        };
        let account = non_empty("BALLAST_ACCOUNT_ID");
        if let Some(a) = &account {
            if a.len() != 12 || !a.bytes().all(|b| b.is_ascii_digit()) {
                return Err(SettingsError::Invalid {
                    name: "BALLAST_ACCOUNT_ID",
                    reason: format!("`{a}` is not a 12-digit account id"),
                });
            }
        }
        let owner =
            non_empty("AWS_LAMBDA_LOG_STREAM_NAME").unwrap_or_else(|| format!("ballast-{}", std::process::id()));
        let cluster_access = match non_empty("BALLAST_CLUSTER_ACCESS").as_deref().map(str::trim) {
            None | Some("eks") => ClusterAccess::Eks,
            Some("kubeconfig") => ClusterAccess::Kubeconfig,
            Some("none") => ClusterAccess::None,
            Some(other) => {
                return Err(SettingsError::Invalid {
                    name: "BALLAST_CLUSTER_ACCESS",
                    reason: format!("`{other}` is not one of eks, kubeconfig, none"),
                })
            }
        };
        let max_receives = match non_empty("BALLAST_MAX_RECEIVES") {
            None => None,
            Some(v) => match v.trim().parse::<u32>() {
                Ok(n) if n >= 1 => Some(n),
                _ => {
                    return Err(SettingsError::Invalid {
                        name: "BALLAST_MAX_RECEIVES",
                        reason: format!("`{v}` is not the queue's maxReceiveCount (a whole number, 1 or more)"),
                    })
                }
            },
        };
        Ok(Settings {
            config,
            dead_letter_queue_url: non_empty("BALLAST_DEAD_LETTER_QUEUE_URL"),
            max_receives,
            account,
            owner,
            cluster_access,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn exactly_one_config_source() {
        assert_eq!(Settings::from_env(env(&[])), Err(SettingsError::NoConfig));
        let many = Settings::from_env(env(&[("BALLAST_CONFIG", "x"), ("BALLAST_CONFIG_PARAMETER", "/p")])).unwrap_err();
        assert_eq!(
            many.to_string(),
            "BALLAST_CONFIG, BALLAST_CONFIG_PARAMETER are all set; set exactly one config source"
        );
        let s = Settings::from_env(env(&[
            ("BALLAST_CONFIG_PARAMETER", "/ballast/config"),
            ("AWS_LAMBDA_LOG_STREAM_NAME", "2026/11/21/[$LATEST]abc"),
        ]))
        .unwrap();
        assert_eq!(s.config, ConfigSource::SsmParameter("/ballast/config".into()));
        assert_eq!(s.owner, "2026/11/21/[$LATEST]abc");
    }

    #[test]
    fn max_receives_is_a_positive_count() {
        let receives = |v: &str| Settings::from_env(env(&[("BALLAST_CONFIG", "x"), ("BALLAST_MAX_RECEIVES", v)]));
        assert_eq!(receives("").unwrap().max_receives, None);
        assert_eq!(receives("10").unwrap().max_receives, Some(10));
        for bad in ["0", "-1", "ten"] {
            let err = receives(bad).unwrap_err().to_string();
            assert!(err.starts_with(&format!("BALLAST_MAX_RECEIVES: `{bad}` is not")), "{err}");
        }
    }

    #[test]
    fn account_is_checked() {
        let err = Settings::from_env(env(&[("BALLAST_CONFIG", "x"), ("BALLAST_ACCOUNT_ID", "12")])).unwrap_err();
        assert!(err.to_string().starts_with("BALLAST_ACCOUNT_ID: `12` is not"));
    }

    #[test]
    fn cluster_access_defaults_to_eks_and_is_checked() {
        let access = |v: &str| Settings::from_env(env(&[("BALLAST_CONFIG", "x"), ("BALLAST_CLUSTER_ACCESS", v)]));
        assert_eq!(access("").unwrap().cluster_access, ClusterAccess::Eks);
        assert_eq!(access("none").unwrap().cluster_access, ClusterAccess::None);
        assert_eq!(
            access("kubectl").unwrap_err().to_string(),
            "BALLAST_CLUSTER_ACCESS: `kubectl` is not one of eks, kubeconfig, none"
        );
    }
}
