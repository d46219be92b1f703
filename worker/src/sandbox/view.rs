//! What a command sees of the file system, worked out once at start: the
//! system directories, the toolchain directories of `PATH`, what
//! `--sandbox-show` adds, a private `HOME` keeping only the toolchain, and
//! inside all that the paths that stay hidden. Nothing else of the machine
//! is mounted: a sandbox shows by list, so a secret left beside the
//! workspaces (an `arbiter-admin` deployment directory, another role's
//! credential) is not there to read. [`View::args`] turns it into bwrap's
//! mounts; [`super::exposure`] checks what it shows for secrets.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::SandboxConfig;

/// Directories of the operating system, shown read-only at their own path
/// (a symlink, such as `/bin` → `usr/bin` on a merged `/usr`, is made again
/// as the same symlink). `/etc` is the only one of them whose content the
/// start-up check reads ([`View::scanned`]): the others belong to the
/// package manager.
const SYSTEM_DIRS: [&str; 10] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys", "/nix",
];
/// The system directories the package manager owns, which the start-up
/// check does not walk.
const PACKAGED: [&str; 9] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys", "/nix",
];
/// Paths hidden wherever they fall inside what is shown: container and
/// orchestrator secrets, per-user runtime directories (agent sockets),
/// container engines' sockets (each one is root on the host).
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
pub(super) const HOME_KEPT: [&str; 3] = [".rustup", ".pyenv", ".gitconfig"];
/// Toolchain trees in `HOME` that the start-up check does not walk (tens of
/// thousands of files, installed by rustup and pyenv).
const HOME_TOOLCHAINS: [&str; 2] = [".rustup", ".pyenv"];
/// Where commands get their `HOME` when the worker's cannot be used.
const FALLBACK_HOME: &str = "/tmp";
/// The `LANG` of commands when the worker has none.
const DEFAULT_LANG: &str = "C.UTF-8";

/// A system directory as it is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
enum System {
    Dir(PathBuf),
    /// A symlink made again at `path`, pointing where the machine's does.
    Link {
        path: PathBuf,
        target: PathBuf,
    },
}

/// A path hidden from commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Hidden {
    /// An empty tmpfs over it.
    Dir(PathBuf),
    /// `/dev/null` bound over it; the mount forbids devices, so opening
    /// it fails with `Permission denied`.
    File(PathBuf),
}

impl Hidden {
    pub(super) fn path(&self) -> &Path {
        match self {
            Hidden::Dir(p) | Hidden::File(p) => p,
        }
    }
}

/// What commands see, resolved against the worker's environment.
#[derive(Debug, Clone, Default)]
pub(super) struct View {
    system: Vec<System>,
    /// Bound read-only at their own path: toolchain directories of `PATH`
    /// outside `HOME` (with the prefix of a `…/bin`), `RUSTUP_HOME`, the
    /// shell's directory, the files `/etc`'s symlinks point to, and what
    /// `--sandbox-show` names.
    /// Each by its real path (symlinks resolved).
    shown: Vec<PathBuf>,
    /// Paths of `shown` given through a symlink, made again as one:
    /// (the path given, its real path).
    aliases: Vec<(PathBuf, PathBuf)>,
    /// The private `HOME` (a tmpfs), when the worker has a usable one.
    home: Option<PathBuf>,
    /// What is bound read-only inside the private `HOME`.
    home_kept: Vec<PathBuf>,
    /// Inside what is shown, what is not.
    pub(super) hidden: Vec<Hidden>,
    /// The environment commands get.
    vars: Vec<(OsString, OsString)>,
}

/// bwrap's arguments but the per-command ones, in two parts: the
/// workspace is bound between them.
#[derive(Debug, Clone, Default)]
pub(super) struct BwrapArgs {
    /// Namespaces, and every mount the workspace may lie under.
    pub(super) mounts: Vec<OsString>,
    /// What must come after the workspace: the hidden directories and the
    /// root made read-only (the workspace's mount point may be made in one
    /// of them), and the environment.
    pub(super) seal: Vec<OsString>,
}

impl BwrapArgs {
    fn mount(&mut self, items: &[&OsStr]) {
        self.mounts.extend(items.iter().map(|s| s.to_os_string()));
    }

    fn seal(&mut self, items: &[&OsStr]) {
        self.seal.extend(items.iter().map(|s| s.to_os_string()));
    }
}

impl View {
    /// Works out what commands see. `env` reads the worker's environment;
    /// every session's workspace lies under `workspace_root`.
    pub(super) fn new(
        config: &SandboxConfig,
        workspace_root: &Path,
        shell: &Path,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Self {
        let mut view = View::default();
        for dir in SYSTEM_DIRS {
            let path = PathBuf::from(dir);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(&path) {
                        view.system.push(System::Link { path, target });
                    }
                }
                Ok(meta) if meta.is_dir() => view.system.push(System::Dir(path)),
                _ => {}
            }
        }
        let path = env("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        let path_dirs: Vec<PathBuf> = std::env::split_paths(&path)
            .filter(|dir| dir.is_absolute())
            .collect();
        let home = env("HOME")
            .map(PathBuf::from)
            .filter(|home| home.is_absolute() && home.parent().is_some() && home.is_dir());
        let rustup_home = env("RUSTUP_HOME").map(PathBuf::from);
        let in_home = |p: &Path| home.as_ref().is_some_and(|h| p.starts_with(h));
        let mut shown: Vec<PathBuf> = Vec::new();
        for dir in &path_dirs {
            if in_home(dir) {
                continue;
            }
            shown.push(dir.clone());
            if let Some(prefix) = install_prefix(dir) {
                shown.push(prefix);
            }
        }
        shown.extend(rustup_home.iter().filter(|r| !in_home(r)).cloned());
        shown.extend(shell.parent().map(Path::to_path_buf));
        shown.extend(config.show.iter().cloned());
        shown.extend(etc_link_targets());
        let mut real: Vec<PathBuf> = Vec::new();
        for path in shown {
            let Ok(resolved) = path.canonicalize() else {
                continue;
            };
            if view.shows_system(&path) {
                continue;
            }
            if resolved != path && !view.aliases.iter().any(|(a, _)| *a == path) {
                view.aliases.push((path, resolved.clone()));
            }
            real.push(resolved);
        }
        real.sort();
        real.dedup();
        // What an earlier (shorter) entry already shows needs no mount of its own.
        for path in real {
            if !view.shown.iter().any(|k| path.starts_with(k)) {
                view.shown.push(path);
            }
        }
        if let Some(home) = &home {
            let mut kept: Vec<PathBuf> = path_dirs
                .iter()
                .filter(|dir| dir.starts_with(home) && *dir != home)
                .cloned()
                .collect();
            kept.extend(HOME_KEPT.iter().map(|name| home.join(name)));
            kept.extend(rustup_home.iter().filter(|r| r.starts_with(home)).cloned());
            kept.sort();
            kept.dedup();
            kept.retain(|keep| keep.exists());
            view.home_kept = kept;
        }
        view.home = home.clone();
        // Toolchains must stay visible: a secret file's directory is hidden
        // only where that hides none of them.
        let mut toolchain = path_dirs.clone();
        toolchain.extend(rustup_home.clone());
        toolchain.extend(shell.parent().map(Path::to_path_buf));
        let mut hidden = vec![workspace_root.to_path_buf()];
        hidden.extend(ALWAYS_HIDDEN.iter().map(PathBuf::from));
        hidden.extend(config.hide.iter().cloned());
        for file in &config.secret_files {
            hidden.extend(secret_hides(file, &toolchain));
        }
        // Only what is shown needs hiding; the workspace root always is
        // (an empty, read-only mount point for the one workspace bound in
        // it), wherever it lies, `/tmp` included.
        let root = workspace_root.canonicalize().ok();
        view.hidden = resolve_hidden(&hidden)
            .into_iter()
            .filter(|h| view.shows(h.path()) || Some(h.path()) == root.as_deref())
            .collect();
        view.vars = command_env(config, &path, home.as_deref(), rustup_home, env);
        view
    }

    /// Whether a system directory shows `path` (through its real path).
    fn shows_system(&self, path: &Path) -> bool {
        let real = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        self.system.iter().any(|s| match s {
            System::Dir(dir) => path.starts_with(dir) || real.starts_with(dir),
            System::Link { path: link, .. } => path.starts_with(link),
        })
    }

    /// Whether commands would see `path` but for what is hidden.
    pub(super) fn shows(&self, path: &Path) -> bool {
        if self.shows_system(path) || self.shown.iter().any(|s| path.starts_with(s)) {
            return true;
        }
        match &self.home {
            Some(home) if path.starts_with(home) => {
                self.home_kept.iter().any(|k| path.starts_with(k))
            }
            _ => false,
        }
    }

    /// Whether `path` is hidden (it or a directory above it).
    pub(super) fn hides(&self, path: &Path) -> bool {
        self.hidden.iter().any(|h| match h {
            Hidden::Dir(dir) => path.starts_with(dir),
            Hidden::File(file) => path == file,
        })
    }

    /// The trees the start-up check walks: everything shown but what the
    /// package manager owns and the toolchain trees of `HOME`.
    pub(super) fn scanned(&self) -> Vec<PathBuf> {
        let mut roots: Vec<PathBuf> = self
            .system
            .iter()
            .filter_map(|s| match s {
                System::Dir(dir) if !PACKAGED.iter().any(|p| dir == Path::new(p)) => {
                    Some(dir.clone())
                }
                _ => None,
            })
            .collect();
        roots.extend(self.shown.iter().cloned());
        if let Some(home) = &self.home {
            let toolchains: Vec<PathBuf> = HOME_TOOLCHAINS.iter().map(|t| home.join(t)).collect();
            roots.extend(
                self.home_kept
                    .iter()
                    .filter(|k| !toolchains.iter().any(|t| k.starts_with(t)))
                    .cloned(),
            );
        }
        roots
    }

    /// bwrap's arguments but the per-command ones. Mount order matters:
    /// later mounts cover earlier ones.
    pub(super) fn args(&self, unshare_net: bool) -> BwrapArgs {
        let mut args = BwrapArgs::default();
        // A user namespace of its own, and none further inside: commands
        // cannot make namespaces of their own (seccomp may allow it, in a
        // container). bwrap's root starts as an empty tmpfs.
        args.mount(&[
            "--unshare-all".as_ref(),
            "--unshare-user".as_ref(),
            "--disable-userns".as_ref(),
        ]);
        if !unshare_net {
            args.mount(&["--share-net".as_ref()]);
        }
        args.mount(&[
            "--die-with-parent".as_ref(),
            "--new-session".as_ref(),
            "--cap-drop".as_ref(),
            "ALL".as_ref(),
        ]);
        for system in &self.system {
            match system {
                System::Dir(dir) => {
                    args.mount(&["--ro-bind".as_ref(), dir.as_os_str(), dir.as_os_str()])
                }
                System::Link { path, target } => {
                    args.mount(&["--symlink".as_ref(), target.as_os_str(), path.as_os_str()])
                }
            }
        }
        args.mount(&[
            "--dev".as_ref(),
            "/dev".as_ref(),
            "--proc".as_ref(),
            "/proc".as_ref(),
            "--tmpfs".as_ref(),
            "/tmp".as_ref(),
            "--tmpfs".as_ref(),
            "/var/tmp".as_ref(),
        ]);
        for path in &self.shown {
            args.mount(&["--ro-bind".as_ref(), path.as_os_str(), path.as_os_str()]);
        }
        for (alias, real) in &self.aliases {
            args.mount(&["--symlink".as_ref(), real.as_os_str(), alias.as_os_str()]);
        }
        if let Some(home) = &self.home {
            args.mount(&["--tmpfs".as_ref(), home.as_os_str()]);
            for keep in &self.home_kept {
                args.mount(&["--ro-bind".as_ref(), keep.as_os_str(), keep.as_os_str()]);
            }
        }
        for hide in &self.hidden {
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
        // The root's tmpfs holds only mount points: nothing can be written there.
        args.seal(&["--remount-ro".as_ref(), "/".as_ref()]);
        args.seal(&["--clearenv".as_ref()]);
        for (name, value) in &self.vars {
            args.seal(&["--setenv".as_ref(), name, value]);
        }
        args
    }
}

/// The prefix of a `PATH` directory `…/bin` whose programs need the rest of
/// it: a Python virtualenv (`pyvenv.cfg`) or a toolchain unpacked in one
/// directory (`lib/` beside `bin/`, as in `/opt/node`). Never `/` or a
/// top-level directory, and never a hidden one (`~/.cargo` keeps registry
/// tokens and every crate's sources beside `bin/`).
fn install_prefix(dir: &Path) -> Option<PathBuf> {
    if dir.file_name() != Some(OsStr::new("bin")) {
        return None;
    }
    let prefix = dir.parent()?;
    let name = prefix.file_name()?.to_str()?;
    let deep = prefix.components().count() > 2;
    let installed = prefix.join("pyvenv.cfg").is_file() || prefix.join("lib").is_dir();
    (deep && !name.starts_with('.') && installed).then(|| prefix.to_path_buf())
}

/// The environment of every command: `PATH`, `HOME`, `LANG`, a dumb
/// terminal and pager, `RUSTUP_HOME` if set, and what `--sandbox-env` passes.
fn command_env(
    config: &SandboxConfig,
    path: &OsStr,
    home: Option<&Path>,
    rustup_home: Option<PathBuf>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<(OsString, OsString)> {
    let home_value = home.map_or_else(|| OsString::from(FALLBACK_HOME), |h| h.into());
    let lang = env("LANG").unwrap_or_else(|| DEFAULT_LANG.into());
    let mut vars: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), path.to_os_string()),
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
    vars
}

/// The files that `/etc`'s own symlinks point to outside every system
/// directory (`/etc/resolv.conf` → `/run/systemd/resolve/stub-resolv.conf`),
/// so that name resolution and the like work; never into `/proc`, `/dev`,
/// or a home directory.
fn etc_link_targets() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/etc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_symlink()))
        .filter_map(|e| e.path().canonicalize().ok())
        .filter(|target| target.is_file())
        .filter(|target| {
            ["/run", "/var"].iter().any(|p| target.starts_with(p))
                && !ALWAYS_HIDDEN.iter().any(|h| target.starts_with(h))
        })
        .collect()
}

/// What to hide for one secret file: its directory, or the file alone
/// where the directory is too broad to hide (`/`, a top-level directory,
/// or one holding a `toolchain` directory). A symlink's target is hidden
/// the same way.
pub(super) fn secret_hides(file: &Path, toolchain: &[PathBuf]) -> Vec<PathBuf> {
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
pub(super) fn resolve_hidden(paths: &[PathBuf]) -> Vec<Hidden> {
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
        let path = h.path();
        !dirs.iter().any(|dir| path != dir && path.starts_with(dir))
    });
    hidden
}
