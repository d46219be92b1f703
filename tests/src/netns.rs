//! Another host, as far as the network goes: a network namespace joined to
//! this one by a veth pair with private addresses the test owns. Processes
//! started in it (`ip netns exec`) reach this host only through that link.
//! Needs root (CI runs as root); removed on drop.

use std::net::Ipv4Addr;
use std::process::Command;

pub struct NetNs {
    pub name: String,
    /// This host's end of the link.
    pub host_ip: Ipv4Addr,
    /// The namespace's end.
    pub ns_ip: Ipv4Addr,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `ip` (iproute2): {e}"));
    assert!(
        out.status.success(),
        "`ip {}` failed (the multi-host tests need root and iproute2): {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl NetNs {
    /// A namespace on a /30 of 10.200.0.0/16 picked from the process id,
    /// so that concurrent test processes do not collide.
    pub fn create(tag: &str) -> Self {
        let n = (std::process::id() as u16 ^ fastrand::u16(..)) & 0x3fff;
        let (a, b) = ((n >> 6) as u8, ((n & 0x3f) as u8) * 4);
        let host_ip = Ipv4Addr::new(10, 200, a, b + 1);
        let ns_ip = Ipv4Addr::new(10, 200, a, b + 2);
        let name = format!("arb-{tag}-{n:x}");
        let (host_if, ns_if) = (format!("va{n:x}"), format!("vb{n:x}"));
        ip(&["netns", "add", &name]);
        let ns = Self {
            name: name.clone(),
            host_ip,
            ns_ip,
        };
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ]);
        ip(&["link", "set", &ns_if, "netns", &name]);
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&[
            "-n",
            &name,
            "addr",
            "add",
            &format!("{ns_ip}/30"),
            "dev",
            &ns_if,
        ]);
        ip(&["-n", &name, "link", "set", &ns_if, "up"]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting the namespace removes the veth pair with it.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
