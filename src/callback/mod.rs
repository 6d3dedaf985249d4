//! Result callbacks: 2captcha's `pingback=<url>` on `in.php` and `callback_url` on `POST
//! /v1/tasks`. When the task ends, the gateway POSTs its result to the URL.
//!
//! Owns: which URLs a caller may name (only hosts on the `callback_hosts` allow-list; none by
//! default), which addresses a delivery may connect to (never loopback, private, link-local or
//! other special ranges unless `callback_allow_networks` lists them), and delivery itself (a
//! timeout per attempt, bounded retries, bounded concurrency). The address check happens when
//! the delivery connects, on the addresses the name resolves to then, and the connection goes
//! only to an address that passed (so a name that re-resolves to an internal address between
//! submission and delivery, DNS rebinding, reaches nothing). Does not own the payloads' shape:
//! the HTTP layer renders them in the caller's protocol.
//!
//! Callback URLs can carry a receiver's secret (a token in the query): they are never logged;
//! logs name the host only.

mod address;
mod deliver;
mod watch;

pub use address::{deliverable, is_special};
pub use deliver::{DeliveryError, Payload};

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use ipnet::IpNet;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::model::limits::MAX_PAGEURL_LEN;

/// Callback settings; every default in `impl Default` with its reason.
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackSettings {
    /// Hosts a callback may go to: exact names or IP literals (`hooks.example.com`,
    /// `203.0.113.7`), or `*.example.com` for any name under `example.com`. Lower case.
    pub hosts: Vec<String>,
    /// Networks a callback may reach although they are special (loopback, private, ...).
    pub allow_networks: Vec<IpNet>,
    /// One delivery attempt, connect to last byte of the reply.
    pub timeout: Duration,
    /// Attempts per callback, the first included.
    pub attempts: u32,
    /// Deliveries in progress at once; more wait their turn.
    pub max_concurrent: usize,
}

impl Default for CallbackSettings {
    fn default() -> Self {
        Self {
            // No host: callbacks are refused until the operator names the receivers, so a
            // gateway never sends requests anywhere a caller chooses.
            hosts: Vec::new(),
            allow_networks: Vec::new(),
            // A receiver only has to store two fields; 10 s is slow for that.
            timeout: Duration::from_secs(10),
            // Rides out a receiver restart (waits of 1 s and 2 s between) without hammering it.
            attempts: 3,
            // Receivers are few and answers arrive at the plan's solve rate, tens a second.
            max_concurrent: 16,
        }
    }
}

/// Why a callback URL was refused when the task was submitted. The messages name the setting
/// an operator would change, never the URL (it may hold a receiver's secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallbackRefusal {
    #[error("callbacks are off on this gateway (its callback_hosts setting is empty)")]
    Disabled,
    #[error("the callback URL must be an absolute http(s) URL of at most {MAX_PAGEURL_LEN} bytes")]
    NotUrl,
    #[error("host `{0}` is not in this gateway's callback_hosts")]
    HostNotAllowed(String),
    #[error(
        "`{0}` is a loopback, private, link-local or other special address (see callback_allow_networks)"
    )]
    AddressNotAllowed(IpAddr),
}

/// A callback URL that passed the submission checks.
#[derive(Clone, PartialEq, Eq)]
pub struct CallbackUrl {
    url: url::Url,
}

impl CallbackUrl {
    /// The host, safe to log.
    pub fn host(&self) -> &str {
        self.url.host_str().unwrap_or("")
    }
}

impl std::fmt::Debug for CallbackUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Path and query may carry the receiver's secret.
        write!(f, "CallbackUrl({})", self.host())
    }
}

/// The callback service: checks URLs at submission, delivers results.
pub struct Callbacks {
    settings: CallbackSettings,
    client: reqwest::Client,
    permits: Semaphore,
    /// Deliveries started and not yet finished (sending, or waiting for a permit or a retry).
    pending: AtomicUsize,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl Callbacks {
    /// Builds the service. Fails only when no HTTP client can be built (TLS roots missing).
    pub fn new(
        settings: CallbackSettings,
        shutdown: CancellationToken,
        tracker: TaskTracker,
    ) -> Result<Arc<Self>, DeliveryError> {
        let client = deliver::client(&settings)?;
        Ok(Arc::new(Self {
            permits: Semaphore::new(settings.max_concurrent.max(1)),
            pending: AtomicUsize::new(0),
            settings,
            client,
            shutdown,
            tracker,
        }))
    }

    pub fn settings(&self) -> &CallbackSettings {
        &self.settings
    }

    /// Deliveries started and not finished: at most `max_concurrent x QUEUE_PER_SLOT`.
    pub fn pending(&self) -> usize {
        self.pending.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Checks a caller's callback URL: absolute http(s), host on the allow-list, and an IP
    /// literal host deliverable. Names are resolved and checked again at each delivery.
    pub fn check(&self, raw: &str) -> Result<CallbackUrl, CallbackRefusal> {
        if self.settings.hosts.is_empty() {
            return Err(CallbackRefusal::Disabled);
        }
        let raw = raw.trim();
        if raw.len() > MAX_PAGEURL_LEN {
            return Err(CallbackRefusal::NotUrl);
        }
        let url = url::Url::parse(raw).map_err(|_| CallbackRefusal::NotUrl)?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(CallbackRefusal::NotUrl);
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) => d.to_owned(),
            Some(url::Host::Ipv4(ip)) => {
                self.check_ip(IpAddr::V4(ip))?;
                ip.to_string()
            }
            Some(url::Host::Ipv6(ip)) => {
                self.check_ip(IpAddr::V6(ip))?;
                format!("[{ip}]")
            }
            None => return Err(CallbackRefusal::NotUrl),
        };
        if !host_allowed(&host, &self.settings.hosts) {
            return Err(CallbackRefusal::HostNotAllowed(host));
        }
        Ok(CallbackUrl { url })
    }

    fn check_ip(&self, ip: IpAddr) -> Result<(), CallbackRefusal> {
        if deliverable(ip, &self.settings.allow_networks) {
            Ok(())
        } else {
            Err(CallbackRefusal::AddressNotAllowed(ip))
        }
    }
}

/// Whether `host` (as the URL parser spells it: lower case, IPv6 in brackets) is on the list.
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|entry| match entry.strip_prefix("*.") {
        Some(domain) => host
            .strip_suffix(domain)
            .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
        None => host == entry,
    })
}

/// An allow-list entry as the URL parser would spell its host, or `None` when it is not a host.
pub fn normalize_host_entry(entry: &str) -> Option<String> {
    let entry = entry.trim();
    let (wild, name) = match entry.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, entry),
    };
    // No scheme, user info, path, query or port; `:` only inside an IPv6 literal's brackets.
    let has_extras =
        name.contains(['/', '@', '?', '#']) || (name.contains(':') && !name.starts_with('['));
    if name.is_empty() || has_extras {
        return None;
    }
    let url = url::Url::parse(&format!("http://{name}/")).ok()?;
    if url.port().is_some() {
        return None;
    }
    let host = url.host_str()?.to_owned();
    if wild && !matches!(url.host(), Some(url::Host::Domain(_))) {
        return None;
    }
    Some(if wild { format!("*.{host}") } else { host })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(hosts: &[&str], networks: &[&str]) -> Arc<Callbacks> {
        Callbacks::new(
            CallbackSettings {
                hosts: hosts
                    .iter()
                    .map(|h| normalize_host_entry(h).unwrap())
                    .collect(),
                allow_networks: networks.iter().map(|n| n.parse().unwrap()).collect(),
                ..CallbackSettings::default()
            },
            CancellationToken::new(),
            TaskTracker::new(),
        )
        .unwrap()
    }

    #[test]
    fn urls_are_refused_unless_their_host_is_listed() {
        let none = service(&[], &[]);
        assert_eq!(
            none.check("https://hooks.example.com/x"),
            Err(CallbackRefusal::Disabled)
        );
        let some = service(
            &["Hooks.Example.com", "*.receivers.example", "127.0.0.1"],
            &[],
        );
        assert!(some.check("https://hooks.example.com/cb?secret=1").is_ok());
        assert!(some.check("http://a.b.receivers.example:8080/").is_ok());
        for (url, refusal) in [
            (
                "https://receivers.example/",
                CallbackRefusal::HostNotAllowed("receivers.example".into()),
            ),
            (
                "https://evilreceivers.example/",
                CallbackRefusal::HostNotAllowed("evilreceivers.example".into()),
            ),
            (
                "https://hooks.example.com.evil.example/",
                CallbackRefusal::HostNotAllowed("hooks.example.com.evil.example".into()),
            ),
            ("ftp://hooks.example.com/", CallbackRefusal::NotUrl),
            ("/relative", CallbackRefusal::NotUrl),
            ("file:///etc/passwd", CallbackRefusal::NotUrl),
            (
                "http://127.0.0.1:9/",
                CallbackRefusal::AddressNotAllowed("127.0.0.1".parse().unwrap()),
            ),
            (
                "http://[::ffff:127.0.0.1]/",
                CallbackRefusal::AddressNotAllowed("::ffff:127.0.0.1".parse().unwrap()),
            ),
            (
                "http://169.254.169.254/latest/meta-data",
                CallbackRefusal::AddressNotAllowed("169.254.169.254".parse().unwrap()),
            ),
        ] {
            assert_eq!(some.check(url), Err(refusal), "{url}");
        }
        let long = format!("https://hooks.example.com/{}", "a".repeat(MAX_PAGEURL_LEN));
        assert_eq!(some.check(&long), Err(CallbackRefusal::NotUrl));
        let loopback_allowed = service(&["127.0.0.1"], &["127.0.0.0/8"]);
        assert!(loopback_allowed.check("http://127.0.0.1:9/").is_ok());
    }

    #[test]
    fn refusals_and_debug_never_show_path_or_query() {
        let s = service(&["hooks.example.com"], &[]);
        let ok = s.check("https://hooks.example.com/p?token=s3cret").unwrap();
        assert_eq!(format!("{ok:?}"), "CallbackUrl(hooks.example.com)");
        let e = s.check("https://other.example/p?token=s3cret").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_checked_without_panicking(raw in "\\PC{0,80}", host in "[a-z0-9.*:\\[\\]-]{0,20}") {
            let s = service(&["hooks.example.com", "*.example.org"], &[]);
            if let Ok(url) = s.check(&raw) {
                let h = url.host().to_owned();
                proptest::prop_assert!(h == "hooks.example.com" || h.ends_with(".example.org"), "{}", h);
            }
            let _ = s.check(&format!("http://{host}/"));
            let _ = normalize_host_entry(&host);
            let _ = host_allowed(&host, &["*.example.org".to_owned()]);
        }
    }

    #[test]
    fn allow_list_entries_are_hosts() {
        assert_eq!(
            normalize_host_entry("Hooks.Example.COM").as_deref(),
            Some("hooks.example.com")
        );
        assert_eq!(
            normalize_host_entry("*.Example.com").as_deref(),
            Some("*.example.com")
        );
        assert_eq!(normalize_host_entry("[::1]").as_deref(), Some("[::1]"));
        for bad in [
            "",
            "*.",
            "http://x.example",
            "x.example/path",
            "x.example:80",
            "u@x.example",
            "*.10.0.0.1",
        ] {
            assert_eq!(normalize_host_entry(bad), None, "{bad}");
        }
    }
}
