//! A tunnel port's options: the names it accepts, each value's check (`add-port`/`set-port`,
//! on the control thread) and [`TunnelConfig`], what the port runs with.
use crate::PortError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use wire::tunnel::{TunnelKind, GENEVE_PORT, VXLAN_PORT};

/// Options a tunnel port accepts.
pub const OPTIONS: &[&str] = &[
    "remote_ip",
    "local_ip",
    "key",
    "dst_port",
    "tos",
    "ttl",
    "csum",
    "df_default",
];

/// A tunnel port's configuration, parsed from its options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelConfig {
    /// VXLAN or Geneve.
    pub kind: TunnelKind,
    /// The far end's underlay address (`None`: `remote_ip=flow`, the packet's `tun_dst`).
    pub remote: Option<IpAddr>,
    /// Our underlay address (the socket's bind address; 0.0.0.0 = any).
    pub local: IpAddr,
    /// `local_ip=flow`: the socket is bound to 0.0.0.0 and each datagram leaves from the
    /// packet's `tun_src` (when the pipeline set one; else the route's source).
    pub local_flow: bool,
    /// The VNI sent and required on receive (`None`: `key=flow`, the packet's `tun_id`).
    pub vni: Option<u32>,
    /// UDP destination port (and our bound port).
    pub dst_port: u16,
    /// Whether outer UDP checksums are sent (`csum`; IPv4 default false as in OVS, IPv6
    /// default true; `csum=false` over IPv6 sends zero on the native path only, the socket
    /// path's kernel socket always sums).
    pub csum: bool,
    /// Outer TOS byte, if set.
    pub tos: Option<u8>,
    /// Outer TTL, if set.
    pub ttl: Option<u8>,
    /// Whether outer IPv4 packets carry DF (`df_default`, default true as in OVS).
    pub df: bool,
}

/// Checks one option's value (for `add-port`/`set-port`).
pub fn check_option(key: &str, v: &str) -> Result<(), String> {
    match key {
        "remote_ip" | "local_ip" => {
            if v == "flow" {
                return Ok(());
            }
            v.parse::<IpAddr>()
                .map(|_| ())
                .map_err(|_| format!("{v:?} is not an IPv4 or IPv6 address"))
        }
        "key" => {
            if v == "flow" {
                return Ok(());
            }
            match v.parse::<u32>() {
                Ok(n) if n < 1 << 24 => Ok(()),
                _ => Err(format!("{v:?} is not a VNI from 0 to 16777215")),
            }
        }
        "dst_port" => match v.parse::<u16>() {
            Ok(n) if n > 0 => Ok(()),
            _ => Err(format!("{v:?} is not a UDP port from 1 to 65535")),
        },
        "csum" | "df_default" => match v {
            "true" | "false" => Ok(()),
            _ => Err(format!("{v:?} is not true or false")),
        },
        "tos" => v
            .parse::<u8>()
            .map(|_| ())
            .map_err(|_| format!("{v:?} is not a TOS byte (0..255)")),
        "ttl" => match v.parse::<u8>() {
            Ok(n) if n > 0 => Ok(()),
            _ => Err(format!("{v:?} is not a TTL from 1 to 255")),
        },
        _ => Ok(()),
    }
}

impl TunnelConfig {
    /// Parses the options of a `vxlan` or `geneve` port (`opt` looks one up by name).
    pub fn parse<'a>(
        kind: TunnelKind,
        opt: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<TunnelConfig, PortError> {
        for k in OPTIONS {
            if let Some(v) = opt(k) {
                check_option(k, v).map_err(|e| PortError(format!("{k}: {e}")))?;
            }
        }
        let remote = match opt("remote_ip")
            .ok_or_else(|| PortError("a tunnel port needs remote_ip=IP|flow".into()))?
        {
            "flow" => None,
            v => Some(
                v.parse::<IpAddr>()
                    .map_err(|_| PortError("bad remote_ip".into()))?,
            ),
        };
        let local_flow = opt("local_ip") == Some("flow");
        let local = opt("local_ip").and_then(|v| v.parse::<IpAddr>().ok());
        let v6 = remote.map_or(local.is_some_and(|l| l.is_ipv6()), |r| r.is_ipv6());
        if local_flow && v6 {
            return Err(PortError(
                "local_ip=flow needs an IPv4 underlay (tun_src is an IPv4 address)".into(),
            ));
        }
        let any = if v6 {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        };
        let local = local.unwrap_or(any);
        if local.is_ipv6() != v6 {
            return Err(PortError(
                "local_ip and remote_ip must both be IPv4 or both IPv6".into(),
            ));
        }
        let num = |k: &str| opt(k).and_then(|v| v.parse::<u32>().ok());
        Ok(TunnelConfig {
            kind,
            remote,
            local,
            local_flow,
            vni: match opt("key") {
                Some("flow") => None,
                _ => Some(num("key").unwrap_or(0)),
            },
            dst_port: num("dst_port").map_or(
                match kind {
                    TunnelKind::Vxlan => VXLAN_PORT,
                    TunnelKind::Geneve => GENEVE_PORT,
                },
                |p| p as u16,
            ),
            csum: match opt("csum") {
                Some("true") => true,
                // Over IPv6 a zero UDP checksum is allowed for tunnels (RFC 6935): the native
                // path sends it; the socket path's kernel socket always sums.
                Some(_) => false,
                // As OVS: no UDP checksum over IPv4 unless asked; over IPv6 one by default
                // (the Linux kernel's VXLAN drops zero ones unless `udp6zerocsumrx`).
                None => v6,
            },
            tos: num("tos").map(|v| v as u8),
            ttl: num("ttl").map(|v| v as u8),
            df: opt("df_default") != Some("false"),
        })
    }
}
