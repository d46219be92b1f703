//! The sandbox the `bash` tool's commands run in. By default every command
//! runs under bubblewrap (`bwrap`): new namespaces (its own processes and
//! `/proc`, so the worker and its environment cannot be seen), a cleared
//! environment, all capabilities dropped, and a file system that shows by
//! list ([`view`]: the system and toolchain directories read-only, the
//! session's workspace, a private `/tmp` and a private `$HOME`), with the
//! worker's secrets hidden even there. `docs/tools.md` ("Sandbox") says what
//! commands can see and do.
//!
//! Everything is worked out once, at start ([`Sandbox::new`], which also
//! refuses a sandbox that shows a secret of the deployment ([`exposure`]),
//! then [`Sandbox::probe`]); each command only adds its workspace and its line.

mod exposure;
mod view;

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
pub use exposure::Exposed;
use view::{BwrapArgs, View};

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
    /// Paths shown to commands read-only besides the system and toolchain
    /// directories (`--sandbox-show`).
    pub show: Vec<PathBuf>,
    /// Paths hidden from commands as they are (`--sandbox-hide`), where
    /// what is shown holds them: a directory shows empty and read-only, any
    /// other file cannot be opened.
    pub hide: Vec<PathBuf>,
    /// Files that hold the worker's secrets (NATS credentials, nkey, TLS
    /// key, the config file), however they were given. Where what is shown
    /// holds one, its directory is hidden; the file alone where that
    /// directory is `/`, a top-level directory, or holds the toolchain (a
    /// PATH entry), which commands need.
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
    #[error(
        "--sandbox bwrap: commands could read {}, {}; the sandbox must show no key or other \
         credential of the deployment: move it out of what the sandbox shows (docs/tools.md, \
         \"Sandbox\"), or hide it with --sandbox-hide",
        .0.path.display(), .0.what
    )]
    Exposed(Exposed),
}

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

impl Bwrap {
    /// bwrap's arguments around a program run in `workspace` (bound at its
    /// own path, the program's directory) with `env` set besides the
    /// sandbox's own: everything up to the `--` before the program.
    fn around(
        &self,
        workspace: &Path,
        also: &[PathBuf],
        env: &[(String, String)],
    ) -> Vec<OsString> {
        let mut args = self.args.mounts.clone();
        for dir in std::iter::once(workspace).chain(also.iter().map(PathBuf::as_path)) {
            args.extend([OsString::from("--bind"), dir.into(), dir.into()]);
        }
        args.extend(self.args.seal.iter().cloned());
        for (name, value) in env {
            args.extend([OsString::from("--setenv"), name.into(), value.into()]);
        }
        args.extend([OsString::from("--chdir"), workspace.into(), "--".into()]);
        args
    }
}

/// What of the worker's environment a program it runs unconfined on the
/// workspace's behalf (an MCP server, git) keeps: the PATH, LANG and HOME.
fn unconfined_server_env() -> impl Iterator<Item = (&'static str, OsString)> {
    ["PATH", "LANG", "HOME"]
        .into_iter()
        .filter_map(|name| std::env::var_os(name).map(|value| (name, value)))
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
                let view = View::new(config, workspace_root, &shell, &env);
                let scan = exposure::scan(&view);
                if let Some(exposed) = scan.exposed {
                    return Err(SandboxError::Exposed(exposed));
                }
                if scan.cut {
                    tracing::warn!(
                        "the sandbox shows more files than the start-up check for secrets reads; \
                         it looked at the first {} (narrow --sandbox-show)",
                        exposure::MAX_ENTRIES
                    );
                }
                let bwrap = Bwrap {
                    program,
                    args: view.args(config.unshare_net),
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
                    .args(bwrap.around(workspace, &[], &[]))
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

    /// The command that runs `program` with `args` on the workspace's
    /// behalf (an MCP server over stdio, git for a checkpoint), in
    /// `workspace`, with `env` besides what every command gets.
    /// In the sandbox it sees what `bash`'s commands see; unconfined, the
    /// worker's environment is cleared but for the PATH, LANG and HOME.
    /// The caller sets stdio; the process ends when its handle is dropped.
    pub(crate) fn server_command(
        &self,
        workspace: &Path,
        program: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Command {
        self.server_command_with(workspace, &[], program, args, env)
    }

    /// [`Sandbox::server_command`], with the directories `also` shown
    /// (read and write) beside the workspace: a team member's worktree's
    /// repository, for git.
    pub(crate) fn server_command_with(
        &self,
        workspace: &Path,
        also: &[PathBuf],
        program: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Command {
        let mut cmd = match &self.bwrap {
            Some(bwrap) => {
                let mut cmd = Command::new(&bwrap.program);
                cmd.env_clear()
                    .args(bwrap.around(workspace, also, env))
                    .arg(program);
                cmd
            }
            None => {
                let mut cmd = Command::new(program);
                cmd.current_dir(workspace)
                    .env_clear()
                    .envs(unconfined_server_env())
                    .envs(env.iter().map(|(n, v)| (n, v)));
                cmd
            }
        };
        cmd.args(args).kill_on_drop(true);
        cmd
    }

    /// An MCP server's command line for a CLI runtime to run it by (the
    /// CLI starts its servers itself): `program` with `args` in the sandbox
    /// as [`Sandbox::server_command`] runs it, with no variables of its
    /// own; unconfined, through `env -i` with the PATH, LANG and HOME.
    pub(crate) fn server_argv(
        &self,
        workspace: &Path,
        program: &str,
        args: &[String],
    ) -> Vec<String> {
        let mut argv: Vec<String> = match &self.bwrap {
            Some(bwrap) => {
                let mut argv = vec![bwrap.program.to_string_lossy().into_owned()];
                argv.extend(
                    bwrap
                        .args
                        .mounts
                        .iter()
                        .map(|a| a.to_string_lossy().into_owned()),
                );
                let ws = workspace.to_string_lossy().into_owned();
                argv.extend(["--bind".to_owned(), ws.clone(), ws.clone()]);
                argv.extend(
                    bwrap
                        .args
                        .seal
                        .iter()
                        .map(|a| a.to_string_lossy().into_owned()),
                );
                argv.extend(["--chdir".to_owned(), ws, "--".to_owned()]);
                argv
            }
            None => {
                let mut argv = vec!["env".to_owned(), "-i".to_owned()];
                for name in ["PATH", "LANG", "HOME"] {
                    if let Some(value) = std::env::var_os(name) {
                        argv.push(format!("{name}={}", value.to_string_lossy()));
                    }
                }
                argv
            }
        };
        argv.push(program.to_owned());
        argv.extend(args.iter().cloned());
        argv
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::view::{HOME_KEPT, Hidden, resolve_hidden, secret_hides};
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
        let args = View::new(
            &config,
            Path::new("/nowhere"),
            Path::new("/bin/bash"),
            &vars,
        )
        .args(config.unshare_net);
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
        let args = View::new(&cut, Path::new("/nowhere"), Path::new("/bin/bash"), &vars)
            .args(cut.unshare_net);
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
            show: vec![outside.path().to_owned()],
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
            show: vec![outside.path().to_owned()],
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

    /// What the user sees: at `/`, only the system directories, the private
    /// `/tmp`, `/var/tmp`, `HOME` and the toolchain's mount points, and the
    /// way to the workspace; a directory beside the workspaces (here the
    /// test's own build tree) is not there, though nothing hides it by name.
    #[tokio::test]
    async fn only_what_is_listed_is_shown() {
        let beside = outside_tmp();
        std::fs::write(beside.path().join("admin-notes.txt"), "beside").unwrap();
        let (_base, ctx) = context();
        let b = beside.path().display();
        let line = format!("ls -A /; cat {b}/admin-notes.txt");
        let out = run(&ctx, "bash", &json!({ "command": line })).await;
        let mut lines = out.content.lines().skip(1);
        let top: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("cat:"))
            .collect();
        let allowed = [
            "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "sys", "nix", "dev",
            "proc", "tmp", "var", "run", "root", "home", "opt",
        ];
        for name in &top {
            assert!(allowed.contains(name), "/{name} is shown: {out:?}");
        }
        for name in ["usr", "etc", "tmp", "proc", "dev"] {
            assert!(top.contains(&name), "/{name} is missing: {out:?}");
        }
        assert!(
            out.content.contains(&format!(
                "cat: {b}/admin-notes.txt: No such file or directory"
            )),
            "{out:?}"
        );
    }

    /// What the user sees: a worker whose sandbox would show a deployment's
    /// keys does not start, and says which file and what to do; hiding the
    /// directory lets it start.
    #[test]
    fn a_sandbox_that_shows_a_key_of_the_deployment_is_refused() {
        let outside = outside_tmp();
        let secrets = outside.path().join("secrets");
        std::fs::create_dir_all(secrets.join("keys")).unwrap();
        std::fs::write(
            secrets.join("keys/signing.nk"),
            "SAAMLK2ZNL35WSMW37E7UD4VZ7ELPKW7DHC3BWBSD2GCZ7IUQQXZIORRBU\n",
        )
        .unwrap();
        let root = tempfile::tempdir().unwrap();
        let config = SandboxConfig {
            show: vec![outside.path().to_owned()],
            ..Default::default()
        };
        let Err(err) = Sandbox::new(&config, root.path()) else {
            panic!("a sandbox showing a signing key was accepted");
        };
        let said = err.to_string();
        assert!(
            said.contains(&secrets.join("keys/signing.nk").display().to_string())
                && said.contains("signing key")
                && said.contains("--sandbox-hide"),
            "{said}"
        );
        let hidden = SandboxConfig {
            hide: vec![secrets.clone()],
            ..config
        };
        assert!(Sandbox::new(&hidden, root.path()).is_ok());
    }

    #[test]
    fn the_mode_reads_as_bwrap_or_none() {
        assert_eq!("bwrap".parse(), Ok(SandboxMode::Bwrap));
        assert_eq!("none".parse(), Ok(SandboxMode::None));
        assert!("docker".parse::<SandboxMode>().is_err());
        assert_eq!(SandboxMode::default().to_string(), "bwrap");
    }
}
