//! How every process an unsandboxed `bash` command starts is found and
//! killed with it, even one that left its process group (`setsid`, `nohup`
//! then `disown`, a double fork). In the bubblewrap sandbox the command's
//! PID namespace does this; without it (`--sandbox none`) the worker uses,
//! in this order, what the machine allows:
//!
//! 1. a cgroup v2 of its own per command, under the worker's own cgroup,
//!    emptied with `cgroup.kill` (Linux ≥ 5.14, the worker's cgroup writable);
//! 2. a PID namespace of its own per command (`unshare --pid --fork
//!    --kill-child`, which needs `CAP_SYS_ADMIN`);
//! 3. the process group alone: a process that leaves it survives.
//!
//! Which one is chosen once, at start, and said in the worker's log.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a killed command's cgroup is waited for to empty before it is
/// left behind (its processes die within milliseconds; reaping can lag).
const EMPTY_WAIT: Duration = Duration::from_secs(5);
/// Tries, 2 ms apart, to remove a killed cgroup before leaving it to a thread.
const QUICK_TRIES: u32 = 10;
/// Prefix of the cgroups made for commands.
const CGROUP_PREFIX: &str = "arbiter-bash-";
/// The exit code of the wrapper that could not enter its cgroup.
pub(crate) const NO_CGROUP_EXIT: i32 = 125;

/// How a command's stray processes are reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Containment {
    /// A cgroup per command, made under `base`.
    Cgroup { base: PathBuf },
    /// A PID namespace per command, made by this `unshare`.
    PidNamespace { unshare: PathBuf },
    /// The process group only.
    ProcessGroup,
}

impl fmt::Display for Containment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cgroup { base } => write!(f, "a cgroup of their own under {}", base.display()),
            Self::PidNamespace { .. } => f.write_str("a PID namespace of their own (unshare)"),
            Self::ProcessGroup => f.write_str("their process group only"),
        }
    }
}

impl Containment {
    /// The best the machine allows, found by trying each (a few ms).
    pub fn detect(shell: &Path) -> Self {
        if let Some(base) = own_cgroup().filter(|base| cgroup_works(base, shell)) {
            return Self::Cgroup { base };
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        if let Some(unshare) = std::env::split_paths(&path)
            .map(|dir| dir.join("unshare"))
            .find(|p| p.is_file())
            .filter(|unshare| unshare_works(unshare))
        {
            return Self::PidNamespace { unshare };
        }
        Self::ProcessGroup
    }

    /// The program and arguments that run `shell -c line` contained, and the
    /// scope that kills what it starts. An error when its cgroup cannot be made.
    pub(crate) fn wrap(
        &self,
        shell: &Path,
        line: &str,
    ) -> std::io::Result<(PathBuf, Vec<OsString>, Scope)> {
        let plain = || vec![OsString::from("-c"), OsString::from(line)];
        match self {
            Self::Cgroup { base } => {
                let dir = base.join(format!("{CGROUP_PREFIX}{}", uuid::Uuid::new_v4().simple()));
                std::fs::create_dir(&dir)?;
                // The shell moves itself into the cgroup, then becomes the
                // command: all it starts is born inside.
                let args = vec![
                    OsString::from("-c"),
                    OsString::from(format!(
                        "echo $$ > \"$1\" || exit {NO_CGROUP_EXIT}; exec \"$2\" -c \"$3\""
                    )),
                    OsString::from("arbiter-bash"),
                    dir.join("cgroup.procs").into_os_string(),
                    shell.as_os_str().to_owned(),
                    OsString::from(line),
                ];
                Ok((shell.to_owned(), args, Scope(Some(dir))))
            }
            Self::PidNamespace { unshare } => {
                let mut args: Vec<OsString> = ["--pid", "--fork", "--kill-child", "--"]
                    .into_iter()
                    .map(OsString::from)
                    .collect();
                args.push(shell.as_os_str().to_owned());
                args.extend(plain());
                Ok((unshare.clone(), args, Scope(None)))
            }
            Self::ProcessGroup => Ok((shell.to_owned(), plain(), Scope(None))),
        }
    }
}

/// A command's cgroup, if it has one: killed and removed by [`Scope::kill`]
/// or when dropped. (A PID namespace dies with its first process, which the
/// process-group kill reaches.)
#[derive(Debug)]
pub(crate) struct Scope(Option<PathBuf>);

impl Scope {
    /// No cgroup: the process group (or the sandbox) is all there is.
    pub(crate) fn none() -> Self {
        Self(None)
    }

    /// Kills every process in the cgroup at once, then removes it once empty
    /// (in the background: the caller does not wait).
    pub(crate) fn kill(&mut self) {
        let Some(dir) = self.0.take() else {
            return;
        };
        if let Err(e) = std::fs::write(dir.join("cgroup.kill"), "1") {
            tracing::warn!(cgroup = %dir.display(), error = %e, "could not kill a command's cgroup");
        }
        // Usually empty within a few ms; else it is waited for in the background.
        for _ in 0..QUICK_TRIES {
            if std::fs::remove_dir(&dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::spawn(move || {
            let deadline = Instant::now() + EMPTY_WAIT;
            while std::fs::remove_dir(&dir).is_err() {
                if Instant::now() >= deadline {
                    tracing::warn!(cgroup = %dir.display(), "a killed command's cgroup did not empty; left behind");
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        self.kill();
    }
}

/// This process's cgroup v2 directory, if the unified hierarchy is mounted.
fn own_cgroup() -> Option<PathBuf> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // Fields: id parent dev root mount-point options … - fstype source options.
    let mount = mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let fstype = right.split(' ').next()?;
        let fields: Vec<&str> = left.split(' ').collect();
        let mount_point = fields.get(4)?;
        (fstype == "cgroup2" && fields.get(3) == Some(&"/")).then(|| PathBuf::from(mount_point))
    })?;
    Some(mount.join(own.trim_start_matches('/')))
}

/// Whether a command's cgroup can be made under `base`, entered by a shell,
/// and killed: tried once with `true`.
fn cgroup_works(base: &Path, shell: &Path) -> bool {
    let containment = Containment::Cgroup {
        base: base.to_owned(),
    };
    let Ok((program, args, mut scope)) = containment.wrap(shell, "true") else {
        return false;
    };
    let killable = scope
        .0
        .as_ref()
        .is_some_and(|dir| dir.join("cgroup.kill").exists());
    let ran = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    scope.kill();
    killable && ran
}

/// Whether `unshare` may make a PID namespace here: tried once with `true`.
fn unshare_works(unshare: &Path) -> bool {
    std::process::Command::new(unshare)
        .args(["--pid", "--fork", "--kill-child", "--", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_line_is_passed_as_it_is() {
        let shell = Path::new("/bin/bash");
        let line = "echo \"$HOME\" 'it''s' $((1+1))";
        let (program, args, _scope) = Containment::ProcessGroup.wrap(shell, line).unwrap();
        assert_eq!(program, shell);
        assert_eq!(args, [OsString::from("-c"), OsString::from(line)]);
        let ns = Containment::PidNamespace {
            unshare: "/usr/bin/unshare".into(),
        };
        let (program, args, _scope) = ns.wrap(shell, line).unwrap();
        assert_eq!(program, Path::new("/usr/bin/unshare"));
        assert_eq!(args.last().unwrap(), line);
    }
}
