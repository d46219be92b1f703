//! The sandbox the `bash` tool's commands run in. By default every command
//! runs under bubblewrap (`bwrap`): new namespaces (its own processes and
//! `/proc`, so the worker and its environment cannot be seen), a cleared
//! environment, all capabilities dropped, and a read-only file system in
//! which only the session's workspace, a private `/tmp` and a private
//! `$HOME` can be written and the worker's secrets are hidden. `docs/tools.md`
//! ("Sandbox") says what commands can see and do.
//!
//! Everything is worked out once, at start ([`Sandbox::new`], then
//! [`Sandbox::probe`]); each command only adds its workspace and its line.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;

use tokio::process::Command;

pub use crate::contain::Containment;
use crate::contain::Scope;

/// How the tools' commands are confined (`--sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// In bubblewrap namespaces.
    #[default]
    Bwrap,
    /// Not at all: commands run as the worker's user and see what it sees.
    None,
}

impl FromStr for SandboxMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "bwrap" => Ok(Self::Bwrap),
            "none" => Ok(Self::None),
            other => Err(format!("{other:?}: the sandbox is bwrap or none")),
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Bwrap => "bwrap",
            Self::None => "none",
        })
    }
}

/// The sandbox as configured; [`Sandbox::new`] resolves it.
#[derive(Debug, Clone, Default)]
pub struct SandboxConfig {
    pub mode: SandboxMode,
    /// Variables of the worker's environment passed to commands, by name
    /// (`--sandbox-env`). Nothing else of it is, but the PATH and LANG.
    pub env: Vec<String>,
    /// Paths hidden from commands as they are (`--sandbox-hide`): a
    /// directory shows empty and read-only, any other file cannot be opened.
    pub hide: Vec<PathBuf>,
    /// Files that hold the worker's secrets (NATS credentials, TLS key, the
    /// config file). Each one's directory is hidden; the file alone where
    /// that directory is `/`, a top-level directory, or holds the toolchain
    /// (a PATH entry), which commands need.
    pub secret_files: Vec<PathBuf>,
    /// Cut commands off the network: they get a loopback interface only.
    pub unshare_net: bool,
}

/// Why the sandbox cannot be used; the worker does not start.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "--sandbox bwrap: bwrap (bubblewrap) is not on PATH; install it (the `bubblewrap` \
         package), or start with --sandbox none to run tools unconfined (not recommended)"
    )]
    NotInstalled,
    #[error(
        "--sandbox bwrap: bubblewrap cannot set up a sandbox here ({detail}): user namespaces, \
         or the mounts it needs, are not allowed (in Docker, run the worker with --security-opt \
         seccomp=unconfined --security-opt systempaths=unconfined; see \"Sandbox\" in \
         docs/tools.md), or start with --sandbox none to run tools unconfined (not recommended)"
    )]
    Unusable { detail: String },
}

/// Where commands get their `HOME` when the worker's cannot be used.
const FALLBACK_HOME: &str = "/tmp";
/// The `LANG` of commands when the worker has none.
const DEFAULT_LANG: &str = "C.UTF-8";
/// Paths hidden whatever the configuration: container and orchestrator
/// secrets, per-user runtime directories (agent sockets), container
/// engines' sockets (each one is root on the host).
const ALWAYS_HIDDEN: [&str; 7] = [
    "/run/secrets",
    "/var/run/secrets",
    "/run/user",
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
];
/// What stays readable in the private `HOME`, besides the PATH entries in
/// it: toolchains and git's settings.
const HOME_KEPT: [&str; 3] = [".rustup", ".pyenv", ".gitconfig"];
/// How long the start-up probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How the tools' commands are started: resolved once at start, shared by
/// every Orchestrator of the worker.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// `bash`, or `sh` where there is none.
    shell: PathBuf,
    bwrap: Option<Bwrap>,
    /// Without bwrap: how a command's stray processes are killed.
    contain: Containment,
}

#[derive(Debug, Clone)]
struct Bwrap {
    program: PathBuf,
    args: BwrapArgs,
}

/// bwrap's arguments but the per-command ones, in two parts: the
/// workspace is bound between them.
#[derive(Debug, Clone, Default)]
struct BwrapArgs {
    /// Namespaces, and every mount the workspace may lie under.
    mounts: Vec<OsString>,
    /// What must come after the workspace: the hidden directories made
    /// read-only (the workspace's mount point is made in one of them), and
    /// the environment.
    seal: Vec<OsString>,
}

impl BwrapArgs {
    fn mount(&mut self, items: &[&OsStr]) {
        self.mounts.extend(items.iter().map(|s| s.to_os_string()));
    }

    fn seal(&mut self, items: &[&OsStr]) {
        self.seal.extend(items.iter().map(|s| s.to_os_string()));
    }
}

/// A path hidden from commands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hidden {
    /// An empty tmpfs over it.
    Dir(PathBuf),
    /// `/dev/null` bound over it; the mount forbids devices, so opening
    /// it fails with `Permission denied`.
    File(PathBuf),
}

impl Sandbox {
    /// Resolves `config` against the worker's environment: finds `bwrap`
    /// and the shell, and works out what to hide, keep and pass. Every
    /// session's workspace lies under `workspace_root`; all are hidden from
    /// a command but its own.
    pub fn new(config: &SandboxConfig, workspace_root: &Path) -> Result<Self, SandboxError> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let shell = find_shell(&path);
        let (bwrap, contain) = match config.mode {
            SandboxMode::None => (None, Containment::detect(&shell)),
            SandboxMode::Bwrap => {
                let program = find_program("bwrap", &path).ok_or(SandboxError::NotInstalled)?;
                let env = |name: &str| std::env::var_os(name);
                let bwrap = Bwrap {
                    program,
                    args: bwrap_args(config, workspace_root, &shell, &env),
                };
                // The PID namespace bwrap makes holds every process.
                (Some(bwrap), Containment::ProcessGroup)
            }
        };
        Ok(Self {
            shell,
            bwrap,
            contain,
        })
    }

    /// Commands run unconfined, as `--sandbox none` does.
    pub fn unconfined() -> Self {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let shell = find_shell(&path);
        Self {
            contain: Containment::detect(&shell),
            shell,
            bwrap: None,
        }
    }

    /// Runs `true` through the sandbox once, in `workspace`: the worker
    /// refuses to start when that fails.
    pub async fn probe(&self, workspace: &Path) -> Result<(), SandboxError> {
        if self.bwrap.is_none() {
            return Ok(());
        }
        let mut cmd = self.command(workspace, "true");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let unusable = |detail: String| SandboxError::Unusable { detail };
        let output = match cmd.spawn() {
            Ok(child) => tokio::time::timeout(PROBE_TIMEOUT, child.wait_with_output())
                .await
                .map_err(|_| unusable(format!("`true` took over {PROBE_TIMEOUT:?}")))?
                .map_err(|e| unusable(e.to_string()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SandboxError::NotInstalled);
            }
            Err(e) => return Err(unusable(e.to_string())),
        };
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let said = stderr.lines().find(|l| !l.trim().is_empty());
        Err(unusable(match said {
            Some(line) => line.trim().to_owned(),
            None => format!("bwrap ended with {}", output.status),
        }))
    }

    /// Without bwrap, how a command's stray processes are killed; `None` in
    /// the sandbox (its PID namespace holds them all).
    pub fn containment(&self) -> Option<&Containment> {
        self.bwrap.is_none().then_some(&self.contain)
    }

    /// The command that runs `line` with the shell, in `workspace` (which
    /// keeps its absolute path inside the sandbox), and the scope that kills
    /// every process it starts (with its process group, which the caller
    /// kills). The caller sets stdio. An error when its cgroup cannot be made.
    pub(crate) fn contained(
        &self,
        workspace: &Path,
        line: &str,
    ) -> std::io::Result<(Command, Scope)> {
        if self.bwrap.is_some() {
            return Ok((self.command(workspace, line), Scope::none()));
        }
        let (program, args, scope) = self.contain.wrap(&self.shell, line)?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        self.unconfined_env(&mut cmd, workspace);
        Ok((cmd, scope))
    }

    /// The command that runs `line` with the shell, in `workspace` (which
    /// keeps its absolute path inside the sandbox). The caller sets stdio.
    pub(crate) fn command(&self, workspace: &Path, line: &str) -> Command {
        match &self.bwrap {
            Some(bwrap) => {
                let mut cmd = Command::new(&bwrap.program);
                // bwrap's own environment is what `/proc/1/environ` shows
                // inside: it gets none.
                cmd.env_clear()
                    .args(&bwrap.args.mounts)
                    .arg("--bind")
                    .arg(workspace)
                    .arg(workspace)
                    .args(&bwrap.args.seal)
                    .arg("--chdir")
                    .arg(workspace)
                    .arg("--")
                    .arg(&self.shell)
                    .arg("-c")
                    .arg(line);
                cmd
            }
            None => {
                let mut cmd = Command::new(&self.shell);
                cmd.arg("-c").arg(line);
                self.unconfined_env(&mut cmd, workspace);
                cmd
            }
        }
    }

    /// An unconfined command's directory and environment: the worker's, less its secrets.
    fn unconfined_env(&self, cmd: &mut Command, workspace: &Path) {
        cmd.current_dir(workspace);
        for (name, _) in std::env::vars_os() {
            if is_secret_env(&name.to_string_lossy()) {
                cmd.env_remove(name);
            }
        }
        cmd.env("TERM", "dumb")
            .env("PAGER", "cat")
            .env("GIT_PAGER", "cat");
    }
}

/// Whether an environment variable is kept from unconfined commands
/// (`--sandbox none`): API keys, tokens, passwords, and the worker's own
/// settings. Confined commands get none of the worker's environment.
pub fn is_secret_env(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    const WORDS: [&str; 7] = [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
    ];
    const PREFIXES: [&str; 4] = ["NATS_", "ARBITER_", "ANTHROPIC_", "OPENAI_"];
    WORDS.iter().any(|w| upper.contains(w)) || PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// `bash` on `path`, else `sh`.
fn find_shell(path: &OsStr) -> PathBuf {
    find_program("bash", path)
        .or_else(|| find_program("sh", path))
        .unwrap_or_else(|| PathBuf::from("/bin/sh"))
}

/// The first executable file called `name` in the directories of `path`.
fn find_program(name: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|file| {
            std::fs::metadata(file)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

/// bwrap's arguments but the per-command ones. `env` reads the worker's
/// environment. Mount order matters: later mounts cover earlier ones.
fn bwrap_args(
    config: &SandboxConfig,
    workspace_root: &Path,
    shell: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> BwrapArgs {
    let mut args = BwrapArgs::default();
    // A user namespace of its own, and none further inside: commands cannot
    // make namespaces of their own (seccomp may allow it, in a container).
    args.mount(&[
        "--unshare-all".as_ref(),
        "--unshare-user".as_ref(),
        "--disable-userns".as_ref(),
    ]);
    if !config.unshare_net {
        args.mount(&["--share-net".as_ref()]);
    }
    args.mount(&[
        "--die-with-parent".as_ref(),
        "--new-session".as_ref(),
        "--cap-drop".as_ref(),
        "ALL".as_ref(),
        "--ro-bind".as_ref(),
        "/".as_ref(),
        "/".as_ref(),
        "--dev".as_ref(),
        "/dev".as_ref(),
        "--proc".as_ref(),
        "/proc".as_ref(),
        "--tmpfs".as_ref(),
        "/tmp".as_ref(),
    ]);
    let path = env("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let path_dirs: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .collect();
    let rustup_home = env("RUSTUP_HOME").map(PathBuf::from);
    // What commands need to stay visible: hiding a directory that holds one
    // of these would leave them without a toolchain.
    let mut toolchain = path_dirs.clone();
    toolchain.extend(rustup_home.clone());
    toolchain.extend(shell.parent().map(Path::to_path_buf));
    let mut hidden = vec![workspace_root.to_path_buf()];
    hidden.extend(ALWAYS_HIDDEN.iter().map(PathBuf::from));
    hidden.extend(config.hide.iter().cloned());
    for file in &config.secret_files {
        hidden.extend(secret_hides(file, &toolchain));
    }
    for hide in resolve_hidden(&hidden) {
        match hide {
            Hidden::Dir(dir) => {
                args.mount(&["--tmpfs".as_ref(), dir.as_os_str()]);
                args.seal(&["--remount-ro".as_ref(), dir.as_os_str()]);
            }
            Hidden::File(file) => {
                args.mount(&["--ro-bind".as_ref(), "/dev/null".as_ref(), file.as_os_str()])
            }
        }
    }
    let home = env("HOME")
        .map(PathBuf::from)
        .filter(|home| home.is_absolute() && home.parent().is_some() && home.is_dir());
    if let Some(home) = &home {
        args.mount(&["--tmpfs".as_ref(), home.as_os_str()]);
        let mut kept: Vec<PathBuf> = path_dirs
            .iter()
            .filter(|dir| dir.starts_with(home) && *dir != home)
            .cloned()
            .collect();
        kept.extend(HOME_KEPT.iter().map(|name| home.join(name)));
        kept.extend(rustup_home.iter().filter(|r| r.starts_with(home)).cloned());
        kept.sort();
        kept.dedup();
        for keep in kept.iter().filter(|keep| keep.exists()) {
            args.mount(&["--ro-bind".as_ref(), keep.as_os_str(), keep.as_os_str()]);
        }
    }
    args.seal(&["--clearenv".as_ref()]);
    let home_value = home.map_or_else(|| OsString::from(FALLBACK_HOME), PathBuf::into_os_string);
    let lang = env("LANG").unwrap_or_else(|| DEFAULT_LANG.into());
    let mut vars: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), path.clone()),
        ("HOME".into(), home_value),
        ("LANG".into(), lang),
        ("TERM".into(), "dumb".into()),
        ("PAGER".into(), "cat".into()),
        ("GIT_PAGER".into(), "cat".into()),
    ];
    if let Some(rustup_home) = rustup_home {
        vars.push(("RUSTUP_HOME".into(), rustup_home.into_os_string()));
    }
    for name in &config.env {
        if let Some(value) = env(name) {
            vars.retain(|(n, _)| n.as_os_str() != OsStr::new(name));
            vars.push((name.into(), value));
        }
    }
    for (name, value) in &vars {
        args.seal(&["--setenv".as_ref(), name, value]);
    }
    args
}

/// What to hide for one secret file: its directory, or the file alone
/// where the directory is too broad to hide (`/`, a top-level directory,
/// or one holding a `toolchain` directory). A symlink's target is hidden
/// the same way.
fn secret_hides(file: &Path, toolchain: &[PathBuf]) -> Vec<PathBuf> {
    let file = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    let mut paths = vec![file.clone()];
    if let Ok(real) = file.canonicalize()
        && real != *file
    {
        paths.push(real);
    }
    paths
        .into_iter()
        .map(|file| match file.parent() {
            Some(dir)
                if dir.parent().is_some_and(|up| up.parent().is_some())
                    && !toolchain.iter().any(|t| t.starts_with(dir)) =>
            {
                dir.to_path_buf()
            }
            _ => file,
        })
        .collect()
}

/// The paths to hide that exist (a mount needs something to cover), each
/// once, resolved through symlinks; never `/`.
fn resolve_hidden(paths: &[PathBuf]) -> Vec<Hidden> {
    let mut hidden: Vec<Hidden> = Vec::new();
    for path in paths {
        let Ok(real) = path.canonicalize() else {
            continue;
        };
        if real.parent().is_none() {
            continue;
        }
        let hide = if real.is_dir() {
            Hidden::Dir(real)
        } else {
            Hidden::File(real)
        };
        if !hidden.contains(&hide) {
            hidden.push(hide);
        }
    }
    // What lies inside a hidden directory is hidden with it; mounting over
    // it again would fail, as the path no longer exists in the empty tmpfs.
    let dirs: Vec<PathBuf> = hidden
        .iter()
        .filter_map(|h| match h {
            Hidden::Dir(dir) => Some(dir.clone()),
            Hidden::File(_) => None,
        })
        .collect();
    hidden.retain(|h| {
        let path = match h {
            Hidden::Dir(p) | Hidden::File(p) => p,
        };
        !dirs.iter().any(|dir| path != dir && path.starts_with(dir))
    });
    hidden
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::run;
    use crate::tools::tests::{context, context_with};

    fn toolchain() -> Vec<PathBuf> {
        ["/usr/local/bin", "/usr/bin", "/opt/tools/bin"]
            .map(PathBuf::from)
            .to_vec()
    }

    #[test]
    fn a_secret_file_hides_its_directory_unless_that_is_too_broad() {
        let cases = [
            ("/etc/arbiter/nats.creds", "/etc/arbiter"),
            ("/run/secrets/nats.creds", "/run/secrets"),
            ("/home/me/keys/tls.key", "/home/me/keys"),
            // `/` and top-level directories: the file alone.
            ("/nats.creds", "/nats.creds"),
            ("/etc/nats.creds", "/etc/nats.creds"),
            // A directory that holds the toolchain: the file alone.
            ("/opt/tools/nats.creds", "/opt/tools/nats.creds"),
            ("/usr/local/nats.creds", "/usr/local/nats.creds"),
        ];
        for (file, hidden) in cases {
            assert_eq!(
                secret_hides(Path::new(file), &toolchain()),
                vec![PathBuf::from(hidden)],
                "{file}"
            );
        }
    }

    #[test]
    fn hidden_paths_must_exist_and_are_never_the_root() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("keys");
        std::fs::create_dir(&dir).unwrap();
        let file = base.path().join("config.toml");
        std::fs::write(&file, "").unwrap();
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let hidden = resolve_hidden(&[
            dir.clone(),
            file.clone(),
            link,
            base.path().join("missing"),
            PathBuf::from("/"),
        ]);
        let real = |p: &Path| p.canonicalize().unwrap();
        assert_eq!(
            hidden,
            vec![Hidden::Dir(real(&dir)), Hidden::File(real(&file))]
        );
    }

    #[test]
    fn commands_get_a_minimal_environment_and_what_is_passed() {
        let vars = |name: &str| -> Option<OsString> {
            match name {
                "PATH" => Some("/usr/bin:/bin".into()),
                "LANG" => Some("en_GB.UTF-8".into()),
                "HOME" => None,
                "GREETING" => Some("hello".into()),
                _ => None,
            }
        };
        let config = SandboxConfig {
            env: vec!["GREETING".into(), "UNSET".into()],
            ..Default::default()
        };
        let args = bwrap_args(
            &config,
            Path::new("/nowhere"),
            Path::new("/bin/bash"),
            &vars,
        );
        let args: Vec<String> = [args.mounts, args.seal]
            .concat()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let start = args.iter().position(|a| a == "--clearenv").unwrap();
        assert_eq!(
            args[start..].join(" "),
            "--clearenv --setenv PATH /usr/bin:/bin --setenv HOME /tmp --setenv LANG en_GB.UTF-8 \
             --setenv TERM dumb --setenv PAGER cat --setenv GIT_PAGER cat \
             --setenv GREETING hello"
        );
        assert!(args.contains(&"--share-net".to_owned()));
        let cut = SandboxConfig {
            unshare_net: true,
            ..Default::default()
        };
        let args = bwrap_args(&cut, Path::new("/nowhere"), Path::new("/bin/bash"), &vars);
        assert!(!args.mounts.iter().any(|a| a == "--share-net"));
    }

    /// A directory outside `/tmp`, which commands get a private one of.
    fn outside_tmp() -> tempfile::TempDir {
        let deps = std::env::current_exe().unwrap();
        tempfile::tempdir_in(deps.parent().unwrap()).unwrap()
    }

    #[tokio::test]
    async fn secret_directories_and_hidden_paths_show_empty() {
        let outside = outside_tmp();
        let keys = outside.path().join("keys");
        std::fs::create_dir(&keys).unwrap();
        std::fs::write(keys.join("nats.creds"), "SECRET").unwrap();
        let other = outside.path().join("other.txt");
        std::fs::write(&other, "hidden").unwrap();
        let (_base, ctx) = context_with(&SandboxConfig {
            secret_files: vec![keys.join("nats.creds")],
            hide: vec![other.clone()],
            ..Default::default()
        });
        let (k, o) = (keys.display(), other.display());
        let line = format!("ls -A {k}; cat {o}; touch {k}/x; echo end");
        let out = run(&ctx, "bash", &json!({ "command": line })).await;
        assert_eq!(
            out.content,
            format!(
                "exit code: 0\ncat: {o}: Permission denied\n\
                 touch: cannot touch '{k}/x': Read-only file system\nend\n"
            )
        );
    }

    /// A config file whose directory also holds the credentials' directory
    /// (`conf/arbiter.toml`, `conf/creds/nats.creds`): one hidden directory
    /// covers both, and commands still run. Mounting over the inner one
    /// again used to fail, and the worker refused to start.
    #[tokio::test]
    async fn secrets_in_a_directory_inside_another_hidden_one_are_hidden_with_it() {
        let outside = outside_tmp();
        let conf = outside.path().join("conf");
        let creds = conf.join("creds");
        std::fs::create_dir_all(&creds).unwrap();
        std::fs::write(conf.join("arbiter.toml"), "").unwrap();
        std::fs::write(creds.join("nats.creds"), "SECRET").unwrap();
        let hidden = resolve_hidden(&[creds.clone(), conf.clone(), conf.join("arbiter.toml")]);
        assert_eq!(hidden, vec![Hidden::Dir(conf.canonicalize().unwrap())]);
        let (_base, ctx) = context_with(&SandboxConfig {
            secret_files: vec![conf.join("arbiter.toml"), creds.join("nats.creds")],
            ..Default::default()
        });
        let c = conf.display();
        let line = format!("ls -A {c}; echo end");
        let out = run(&ctx, "bash", &json!({ "command": line })).await;
        assert_eq!(out.content, "exit code: 0\nend\n");
    }

    #[tokio::test]
    async fn home_is_private_and_keeps_only_the_toolchain() {
        let Some(home) = std::env::var_os("HOME").map(PathBuf::from) else {
            return;
        };
        if !home.is_dir() || home.parent().is_none() {
            return;
        }
        // What should be left: the first step of every kept path.
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut kept: Vec<PathBuf> = std::env::split_paths(&path)
            .filter(|dir| dir.starts_with(&home) && *dir != home)
            .collect();
        kept.extend(HOME_KEPT.iter().map(|name| home.join(name)));
        let mut expected: Vec<String> = kept
            .iter()
            .filter(|p| p.exists())
            .filter_map(|p| p.strip_prefix(&home).ok()?.components().next())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        expected.sort();
        expected.dedup();
        let (_base, ctx) = context();
        let scratch = format!("arbiter-test-{}", uuid::Uuid::new_v4().simple());
        let line = format!("ls -A \"$HOME\"; touch \"$HOME/{scratch}\" && echo wrote");
        let out = run(&ctx, "bash", &json!({ "command": line })).await;
        let mut listed: Vec<&str> = out.content.lines().skip(1).collect();
        assert_eq!(listed.pop(), Some("wrote"), "{out:?}");
        assert_eq!(listed, expected, "{out:?}");
        assert!(
            !home.join(&scratch).exists(),
            "the private HOME wrote through"
        );
    }

    #[test]
    fn secret_names_are_recognised() {
        assert!(is_secret_env("ANTHROPIC_API_KEY"));
        assert!(is_secret_env("GITHUB_TOKEN"));
        assert!(is_secret_env("NATS_URL"));
        assert!(is_secret_env("db_password"));
        assert!(!is_secret_env("PATH"));
        assert!(!is_secret_env("HOME"));
    }

    #[test]
    fn the_mode_reads_as_bwrap_or_none() {
        assert_eq!("bwrap".parse(), Ok(SandboxMode::Bwrap));
        assert_eq!("none".parse(), Ok(SandboxMode::None));
        assert!("docker".parse::<SandboxMode>().is_err());
        assert_eq!(SandboxMode::default().to_string(), "bwrap");
    }
}
