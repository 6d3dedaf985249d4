//! Which IP addresses a callback may be delivered to: only globally routed unicast addresses,
//! unless the operator lists an exception (`callback_allow_networks`). Everything else (loopback,
//! private, link-local with the cloud metadata service at 169.254.169.254, shared, documentation,
//! multicast, reserved, and IPv6 forms that embed such an IPv4 address) would let a caller make
//! the gateway reach into its own network (SSRF).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

use ipnet::IpNet;

/// Ranges never reached unless allowed (IANA special-purpose registries, RFC 6890 and successors).
const SPECIAL: &[&str] = &[
    // IPv4
    "0.0.0.0/8",       // "this network"
    "10.0.0.0/8",      // private
    "100.64.0.0/10",   // carrier-grade NAT
    "127.0.0.0/8",     // loopback
    "169.254.0.0/16",  // link-local (cloud metadata)
    "172.16.0.0/12",   // private
    "192.0.0.0/24",    // protocol assignments
    "192.0.2.0/24",    // documentation
    "192.88.99.0/24",  // 6to4 relay anycast
    "192.168.0.0/16",  // private
    "198.18.0.0/15",   // benchmarking
    "198.51.100.0/24", // documentation
    "203.0.113.0/24",  // documentation
    "224.0.0.0/4",     // multicast
    "240.0.0.0/4",     // reserved, broadcast
    // IPv6
    "::/96",          // unspecified, loopback, deprecated IPv4-compatible
    "64:ff9b:1::/48", // local-use NAT64
    "100::/64",       // discard
    "2001::/23",      // protocol assignments (Teredo and others)
    "2001:db8::/32",  // documentation
    "fc00::/7",       // unique local
    "fe80::/10",      // link-local
    "fec0::/10",      // old site-local
    "ff00::/8",       // multicast
];

static SPECIAL_NETS: LazyLock<Vec<IpNet>> = LazyLock::new(|| {
    SPECIAL
        .iter()
        .map(|s| s.parse().expect("the special ranges above are valid CIDR"))
        .collect()
});

/// The IPv4 address an IPv6 address stands for, where it embeds one that routing would reach:
/// IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) and
/// 6to4 (`2002::/16`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let seg = ip.segments();
    let low = Ipv4Addr::new(
        (seg[6] >> 8) as u8,
        seg[6] as u8,
        (seg[7] >> 8) as u8,
        seg[7] as u8,
    );
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    if seg[..6] == [0, 0, 0, 0, 0, 0] {
        return Some(low);
    }
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low);
    }
    if seg[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (seg[1] >> 8) as u8,
            seg[1] as u8,
            (seg[2] >> 8) as u8,
            seg[2] as u8,
        ));
    }
    None
}

/// Whether `ip` lies in a special-purpose range (or embeds an IPv4 address that does).
pub fn is_special(ip: IpAddr) -> bool {
    if SPECIAL_NETS.iter().any(|net| net.contains(&ip)) {
        return true;
    }
    match ip {
        IpAddr::V6(v6) => embedded_v4(v6).is_some_and(|v4| is_special(IpAddr::V4(v4))),
        IpAddr::V4(_) => false,
    }
}

/// Whether a callback may connect to `ip`: a global address, or one inside an allowed network.
pub fn deliverable(ip: IpAddr, allowed: &[IpNet]) -> bool {
    let ip = match ip {
        // Judge a mapped address as the IPv4 address it is.
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    !is_special(ip) || allowed.iter().any(|net| net.contains(&ip))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn special_ranges_are_refused_and_public_ones_taken() {
        for refused in [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "2001:db8::1",
        ] {
            assert!(is_special(ip(refused)), "{refused}");
            assert!(!deliverable(ip(refused), &[]), "{refused}");
        }
        for taken in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
        ] {
            assert!(deliverable(ip(taken), &[]), "{taken}");
        }
    }

    #[test]
    fn an_allowed_network_is_an_exception_for_itself_only() {
        let allowed: Vec<IpNet> = vec!["127.0.0.1/32".parse().unwrap()];
        assert!(deliverable(ip("127.0.0.1"), &allowed));
        assert!(deliverable(ip("::ffff:127.0.0.1"), &allowed));
        assert!(!deliverable(ip("127.0.0.2"), &allowed));
        assert!(!deliverable(ip("169.254.169.254"), &allowed));
        assert!(!deliverable(ip("::1"), &allowed));
    }

    proptest! {
        #[test]
        fn every_address_is_judged_without_panicking(a in any::<u32>(), b in any::<u128>()) {
            let v4 = IpAddr::V4(Ipv4Addr::from(a));
            let v6 = IpAddr::V6(Ipv6Addr::from(b));
            // A private or loopback IPv4 address is special in every IPv6 form that embeds it.
            let mapped = IpAddr::V6(Ipv4Addr::from(a).to_ipv6_mapped());
            prop_assert_eq!(deliverable(v4, &[]), deliverable(mapped, &[]));
            let _ = deliverable(v6, &[]);
        }
    }
}
