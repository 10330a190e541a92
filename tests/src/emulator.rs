//! `cargo lambda watch` (the Lambda runtime emulator) on 127.0.0.1, for end-to-end
//! tests of the three functions; stopped with its whole process group when dropped.

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::moto::required;

/// The directory holding `cargo-lambda`: `BALLAST_CARGO_LAMBDA_DIR`, the test
/// script's venv, or `PATH`.
fn cargo_lambda_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("BALLAST_CARGO_LAMBDA_DIR") {
        return Some(PathBuf::from(dir));
    }
    let cached = crate::cache_dir().map(|c| c.join("venv/bin"));
    cached
        .filter(|d| d.join("cargo-lambda").exists())
        .or_else(|| crate::on_path("cargo-lambda")?.parent().map(PathBuf::from))
}

pub struct Emulator {
    child: Child,
    pub port: u16,
    path: String,
}

impl Emulator {
    /// Starts the emulator with these environment variables for the functions.
    pub fn start(env: &[(String, String)]) -> Option<Emulator> {
        let Some(dir) = cargo_lambda_dir() else {
            assert!(!required(), "CI=true but cargo-lambda is missing: run scripts/test");
            eprintln!("skipped: cargo-lambda not found (scripts/test installs it)");
            return None;
        };
        let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
        let port = crate::free_port();
        let mut command = Command::new("cargo");
        command
            .args(["lambda", "watch", "--ignore-changes", "-A", "127.0.0.1", "-P", &port.to_string()])
            .current_dir(crate::repo_root())
            .env("PATH", &path)
            .process_group(0);
        // BALLAST_EMULATOR_LOG=FILE keeps the functions' logs (to see why one failed).
        match std::env::var_os("BALLAST_EMULATOR_LOG").and_then(|p| std::fs::File::create(p).ok()) {
            Some(log) => {
                command.stdout(log.try_clone().map(Stdio::from).unwrap_or(Stdio::null())).stderr(Stdio::from(log));
            }
            None => {
                command.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        for (k, v) in env {
            command.arg("--env-var").arg(format!("{k}={v}"));
        }
        let child = command.spawn().expect("cargo lambda watch starts");
        let mut emulator = Emulator { child, port, path };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = emulator.child.try_wait() {
                panic!("cargo lambda watch exited: {status}");
            }
            assert!(Instant::now() < deadline, "cargo lambda watch did not listen within 60s");
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(emulator)
    }

    /// `cargo lambda invoke FUNCTION --data-file FILE` against this emulator.
    pub fn invoke(&self, function: &str, data_file: &Path) -> Output {
        Command::new("cargo")
            .args(["lambda", "invoke", function, "-A", "127.0.0.1", "-P", &self.port.to_string(), "--data-file"])
            .arg(data_file)
            .current_dir(crate::repo_root())
            .env("PATH", &self.path)
            .output()
            .expect("cargo lambda invoke runs")
    }
}

impl Drop for Emulator {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // The emulator runs each function as a child: stop its whole process group
        // (its own, made at spawn; never a shell's `kill -N` that could read as -1).
        if let Ok(group) = i32::try_from(self.child.id()) {
            if group > 1 {
                // SAFETY: kill(2) with a negative pid signals that process group only.
                unsafe {
                    libc::kill(-group, libc::SIGTERM);
                }
                std::thread::sleep(Duration::from_millis(300));
                unsafe {
                    libc::kill(-group, libc::SIGKILL);
                }
            }
        }
        let _ = self.child.wait();
    }
}
