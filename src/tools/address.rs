//! Where the service may connect on a URL's behalf: the checks shared by the built-in
//! `fetch_url` tool and MCP servers named in a request. A URL is refused for its scheme, for a
//! host not listed, or for an address that is private, loopback or link-local (IPv4 inside
//! IPv6 included); the caller then connects to the addresses checked, never resolving the name
//! again (no DNS rebinding) and never through a proxy from the environment.

use std::net::{IpAddr, SocketAddr};

use url::Url;

/// What a URL must satisfy.
pub struct Rules<'a> {
    /// Hosts that may be reached (`example.com`, or `.example.com` for it and its
    /// subdomains); `None`: every host.
    pub allowed_hosts: Option<&'a [String]>,
    /// Whether private, loopback and link-local addresses may be reached.
    pub allow_private: bool,
    /// What is refused, for the message (`fetching it`).
    pub purpose: &'a str,
}

/// The addresses of the URL's host (at least one), each allowed by `rules`, or why the URL is
/// refused.
pub async fn check(url: &Url, rules: &Rules<'_>) -> Result<Vec<SocketAddr>, String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "Only http and https URLs can be used, not '{}'.",
            url.scheme()
        ));
    }
    let host = url.host_str().ok_or("The URL has no host.")?;
    let bare_host = host.trim_start_matches('[').trim_end_matches(']');
    if let Some(listed) = rules.allowed_hosts
        && !host_listed(listed, bare_host)
    {
        return Err(format!(
            "The host '{bare_host}' is not in the allowed list."
        ));
    }
    let port = url.port_or_known_default().unwrap_or(80);
    let addresses: Vec<SocketAddr> = match bare_host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare_host, port))
            .await
            .map_err(|e| format!("The host '{bare_host}' cannot be resolved: {e}"))?
            .collect(),
    };
    if addresses.is_empty() {
        return Err(format!("The host '{bare_host}' has no address."));
    }
    if !rules.allow_private
        && let Some(bad) = addresses.iter().find(|a| !is_public(a.ip()))
    {
        return Err(format!(
            "The address {} of '{bare_host}' is private, loopback or link-local; {} is not allowed.",
            bad.ip(),
            rules.purpose
        ));
    }
    Ok(addresses)
}

/// Whether `host` is one of `listed`, or under a listed `.domain`.
pub fn host_listed(listed: &[String], host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    listed.iter().any(|allowed| {
        let allowed = allowed.to_ascii_lowercase();
        match allowed.strip_prefix('.') {
            Some(domain) => host == domain || host.ends_with(&format!(".{domain}")),
            None => host == allowed,
        }
    })
}

/// Whether an address is on the public internet.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
                || (a == 198 && (b == 18 || b == 19)) // benchmarking
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if v6.is_loopback() || v6.is_unspecified() {
                return false;
            }
            // An IPv4 address inside the IPv6 one reaches that IPv4 host where the network
            // translates it: judged as the IPv4 address.
            if let Some(v4) = embedded_ipv4(v6) {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x2001 && s[1] == 0) // Teredo: tunnels to an IPv4 host
                || (s[0] == 0x0064 && s[1] == 0xff9b && s[2] == 1) // local-use NAT64
                || (s[0] == 0x0100 && s[1] == 0 && s[2] == 0 && s[3] == 0)) // discard-only
        }
    }
}

/// The IPv4 address an IPv6 address carries, in each form a network may translate:
/// IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, IPv4-translated
/// `::ffff:0:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d` and 6to4 `2002:AABB:CCDD::/48`.
fn embedded_ipv4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let last = |hi: u16, lo: u16| std::net::Ipv4Addr::from(((hi as u32) << 16) | lo as u32);
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(last(hi, lo)),
        [0, 0, 0, 0, 0, 0, hi, lo] => Some(last(hi, lo)),
        [0, 0, 0, 0, 0xffff, 0, hi, lo] => Some(last(hi, lo)),
        [0x0064, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(last(hi, lo)),
        [0x2002, hi, lo, ..] => Some(last(hi, lo)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_loopback_and_link_local_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.16.0.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            // IPv4 inside IPv6: compatible, translated, NAT64, 6to4, Teredo.
            "::127.0.0.1",
            "::ffff:0:7f00:1",
            "64:ff9b::7f00:1",
            "64:ff9b::a00:1",
            "64:ff9b:1::1",
            "2002:7f00:1::",
            "2002:c0a8:101::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:db8::1",
        ] {
            assert!(
                !is_public(ip.parse().unwrap_or(IpAddr::from([1, 1, 1, 1]))),
                "{ip}"
            );
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "2606:4700::1111",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert!(
                is_public(ip.parse().unwrap_or(IpAddr::from([127, 0, 0, 1]))),
                "{ip}"
            );
        }
    }

    #[test]
    fn a_listed_domain_covers_its_subdomains_only() {
        let listed = vec![".example.com".to_string(), "mcp.example.org".to_string()];
        assert!(host_listed(&listed, "api.example.com"));
        assert!(host_listed(&listed, "Example.COM"));
        assert!(!host_listed(&listed, "example.com.evil.org"));
        assert!(host_listed(&listed, "mcp.example.org"));
        assert!(!host_listed(&listed, "x.mcp.example.org"));
    }
}
