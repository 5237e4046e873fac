//! `exec:PROGRAM?arg=X`: runs a program (no shell) with the alert record on its standard input.

use crate::target::decode;
use crate::{io_text, Deliver, Failure};
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// As written (a name without '/' is looked up in PATH at start).
    pub program: String,
    pub args: Vec<String>,
}

impl Config {
    pub(crate) fn parse(rest: &str) -> Result<Config, String> {
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let program = decode(path)?;
        if program.is_empty() {
            return Err("the program is missing: write exec:/path/to/program".into());
        }
        let mut args = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("arg", v)) => args.push(decode(v)?),
                _ => {
                    return Err(format!(
                        "unknown option '{pair}': write ?arg=VALUE (repeatable)"
                    ))
                }
            }
        }
        Ok(Config { program, args })
    }
}

pub(crate) struct Sink {
    path: PathBuf,
    args: Vec<String>,
}

impl Sink {
    pub(crate) fn open(c: Config) -> Result<Sink, String> {
        let path = if c.program.contains('/') {
            PathBuf::from(&c.program)
        } else {
            find_in_path(&c.program)
                .ok_or_else(|| format!("no program '{}' in PATH: give its path", c.program))?
        };
        check_executable(&path)?;
        Ok(Sink { path, args: c.args })
    }
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn check_executable(p: &Path) -> Result<(), String> {
    let meta =
        std::fs::metadata(p).map_err(|e| format!("cannot run {}: {}", p.display(), io_text(&e)))?;
    if !meta.is_file() {
        return Err(format!("{} is not a file", p.display()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(format!("{} is not executable: chmod +x it", p.display()));
    }
    Ok(())
}

impl Deliver for Sink {
    fn deliver(&mut self, alert: &Value, timeout: Duration) -> Result<(), Failure> {
        run(&self.path, &self.args, alert, timeout).map_err(Failure::retry)
    }
}

/// Runs the program in a process group of its own, feeding it the alert; kills the group at the
/// timeout.
fn run(path: &Path, args: &[String], alert: &Value, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut child = Command::new(path)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run {}: {}", path.display(), io_text(&e)))?;
    let mut input = serde_json::to_vec(alert).unwrap_or_default();
    input.push(b'\n');
    if let Some(mut stdin) = child.stdin.take() {
        // A thread: a program that does not read its input must not block us.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let (tx, rx) = mpsc::channel();
    if let Some(mut stderr) = child.stderr.take() {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let _ = (&mut stderr).take(4096).read_to_end(&mut kept);
            let _ = std::io::copy(&mut stderr, &mut std::io::sink());
            let _ = tx.send(kept);
        });
    }
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for {}: {}", path.display(), io_text(&e))),
        }
        let now = Instant::now();
        if now >= deadline {
            // SAFETY: kill(2) on the child's own process group (process_group(0) made it).
            unsafe {
                libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{} did not end within {:.1}s: killed",
                path.display(),
                timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    };
    if status.success() {
        return Ok(());
    }
    let stderr = rx
        .recv_timeout(Duration::from_millis(200))
        .unwrap_or_default();
    let stderr = String::from_utf8_lossy(&stderr);
    let first = stderr
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "failed".to_string(),
    };
    if first.is_empty() {
        Err(format!("{} {how}", path.display()))
    } else {
        Err(format!("{} {how}: {first}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_args() {
        let c = Config::parse("/opt/x%20y/run?arg=a%26b&arg=--flag").unwrap();
        assert_eq!(c.program, "/opt/x y/run");
        assert_eq!(c.args, vec!["a&b", "--flag"]);
        assert!(Config::parse("")
            .unwrap_err()
            .contains("program is missing"));
        assert!(Config::parse("/x?argv=1")
            .unwrap_err()
            .contains("?arg=VALUE"));
    }
}
