//! Where `arbiter-admin` keeps things in its directory. Secrets (seeds, keys,
//! `.creds`) are written owner-only (0600, directories 0700); what the
//! server and clients only need to read (certificates, the server config)
//! is 0644.
//!
//! ```text
//! admin.json               the registry: public keys, every credential issued
//! keys/*.nk                operator, system, account and signing seeds
//! keys/system.creds        the system user, for pushing revocations
//! ca/ca.pem, ca/ca-key.pem the deployment's CA
//! server/                  nats-server.conf, resolver.conf, its certificate and key, the CA
//! creds/<name>/            one bundle per credential: nats.creds, cert.pem, key.pem, ca.pem, env
//! ```

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use nkeys::KeyPair;

use crate::{Error, Result};

#[derive(Debug, Clone)]
pub struct Layout {
    dir: PathBuf,
}

impl Layout {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
        }
    }
    pub fn registry(&self) -> PathBuf {
        self.dir.join("admin.json")
    }
    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.join("keys").join(format!("{name}.nk"))
    }
    pub fn system_creds(&self) -> PathBuf {
        self.dir.join("keys").join("system.creds")
    }
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca").join("ca.pem")
    }
    pub fn ca_key(&self) -> PathBuf {
        self.dir.join("ca").join("ca-key.pem")
    }
    pub fn server_dir(&self) -> PathBuf {
        self.dir.join("server")
    }
    pub fn server_file(&self, name: &str) -> PathBuf {
        self.server_dir().join(name)
    }
    pub fn bundle(&self, name: &str) -> PathBuf {
        self.dir.join("creds").join(name)
    }

    pub(crate) fn create_dirs(&self) -> Result<()> {
        for (sub, mode) in [
            ("", 0o755),
            ("keys", 0o700),
            ("ca", 0o700),
            ("server", 0o755),
            ("creds", 0o755),
        ] {
            let dir = self.dir.join(sub);
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
                .map_err(|e| Error::io(&dir, e))?;
        }
        Ok(())
    }

    /// An empty directory for one credential bundle (an old one is replaced).
    pub(crate) fn fresh_dir(&self, dir: &Path) -> Result<()> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io(dir, e))
    }

    pub(crate) fn write_secret(&self, path: &Path, text: &str) -> Result<()> {
        write(path, text, 0o600)
    }

    pub(crate) fn write_public(&self, path: &Path, text: &str) -> Result<()> {
        write(path, text, 0o644)
    }

    pub(crate) fn read(&self, path: &Path) -> Result<String> {
        std::fs::read_to_string(path).map_err(|e| Error::io(path, e))
    }

    pub(crate) fn read_key(&self, name: &str) -> Result<KeyPair> {
        let path = self.key(name);
        KeyPair::from_seed(self.read(&path)?.trim())
            .map_err(|e| Error::Key(format!("{}: {e}", path.display())))
    }
}

/// Writes a file whole, with `mode`, replacing what was there.
fn write(path: &Path, text: &str, mode: u32) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| Error::io(&tmp, e))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io(&tmp, e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}
