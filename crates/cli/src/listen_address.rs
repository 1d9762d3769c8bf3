//! The address a server listens on, as the command line takes it.

use std::net::SocketAddr;

/// An IP address and a port (`127.0.0.1:8080`, `[::1]:8080`). A host name
/// is refused with what to write instead: the standard parser's "invalid
/// socket address syntax" left `localhost:8080` a puzzle.
pub(crate) fn parse(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        let hint = match text.rsplit_once(':') {
            Some((host, port)) if host.eq_ignore_ascii_case("localhost") => {
                format!(" (for localhost, write 127.0.0.1:{port})")
            }
            Some((host, _)) if !host.is_empty() && host.parse::<std::net::IpAddr>().is_err() => {
                " (a host name is not taken: write its IP address)".to_owned()
            }
            None => " (the port is missing)".to_owned(),
            _ => String::new(),
        };
        format!("{text:?} is not an IP address and port such as 127.0.0.1:8080 or [::1]:8080{hint}")
    })
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_listen_address_is_an_ip_address_and_a_port() {
        assert_eq!(parse("127.0.0.1:8080").unwrap().port(), 8080);
        assert!(parse("[::1]:9000").is_ok());
        let localhost = parse("localhost:18080").unwrap_err();
        assert!(localhost.contains("write 127.0.0.1:18080"), "{localhost}");
        let name = parse("jobs.internal:80").unwrap_err();
        assert!(name.contains("a host name is not taken"), "{name}");
        let no_port = parse("127.0.0.1").unwrap_err();
        assert!(no_port.contains("the port is missing"), "{no_port}");
    }
}
