use std::path::Path;
use std::process::ExitCode;

use super::load_config;

pub fn check(file: &Path) -> anyhow::Result<ExitCode> {
    match load_config(file)? {
        Ok(config) => {
            let names: Vec<&str> = config.pools.iter().map(|p| p.name.as_str()).collect();
            println!(
                "{}: valid: cluster {}, {} pool(s) ({}){}",
                file.display(),
                config.cluster,
                names.len(),
                names.join(", "),
                if config.dry_run { ", dry_run" } else { "" }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(issues) => {
            println!("{}: {} problem(s)", file.display(), issues.len());
            for issue in issues {
                println!("  {issue}");
            }
            Ok(ExitCode::FAILURE)
        }
    }
}
