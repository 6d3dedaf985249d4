//! `[[accounts]]`: the provider accounts the gateway routes over (docs/CONFIGURATION.md
//! "Accounts").
//!
//! Owns: reading the tables, loading each key from its variable or file, and refusing anything
//! ambiguous with one line naming the setting and the fix. Does not own: starting the accounts
//! (serve) or choosing among them (upstream).
//!
//! A key is never written in the file itself: config files get committed, pasted into tickets
//! and mounted world-readable. A `key` field is therefore refused, and its value never echoed.

use std::collections::HashSet;
use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, Secret, bad};
use crate::model::Kind;
use crate::provider::AccountProvider;

/// One validated account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountSpec {
    /// Safe for logs and metric labels: letters, digits, `_`, `-`, `.`.
    pub name: String,
    pub provider: AccountProvider,
    pub base_url: Option<url::Url>,
    /// `None` only for the simulator, which then gets a fresh key.
    pub key: Option<Secret>,
    /// `None`: ask the provider (`threadsinfo`) or use its usual figure, as the flags do.
    pub threads: Option<u32>,
    /// Relative share of traffic among equally good accounts (1-1000).
    pub weight: u32,
    /// The kinds it takes; empty means every kind.
    pub kinds: Vec<Kind>,
}

impl AccountSpec {
    pub fn takes(&self, kind: Kind) -> bool {
        self.kinds.is_empty() || self.kinds.contains(&kind)
    }
}

/// One `[[accounts]]` table as written.
// No `Debug`: a refused `key` field would be shown.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AccountTable {
    name: Option<String>,
    provider: Option<AccountProvider>,
    base_url: Option<String>,
    key_env: Option<String>,
    key_file: Option<PathBuf>,
    /// Accepted only to be refused with a clear message (any TOML type).
    key: Option<toml::Value>,
    threads: Option<u32>,
    weight: Option<u32>,
    #[serde(default)]
    kinds: Vec<String>,
}

/// Most accounts one gateway routes over; routing looks at every one per task.
const MAX_ACCOUNTS: usize = 64;
const MAX_WEIGHT: u32 = 1000;
const MAX_THREADS: u32 = 100_000;

/// Validates every table; `env` looks up `key_env` variables.
pub(super) fn specs(
    tables: &[AccountTable],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<AccountSpec>, ConfigError> {
    if tables.len() > MAX_ACCOUNTS {
        return Err(bad(
            "accounts",
            format!("{} accounts are more than {MAX_ACCOUNTS}", tables.len()),
            "merge accounts of one provider into fewer keys",
        ));
    }
    let mut names = HashSet::new();
    let mut specs = Vec::with_capacity(tables.len());
    for (i, table) in tables.iter().enumerate() {
        let spec = spec(i, table, env)?;
        if !names.insert(spec.name.clone()) {
            return Err(bad(
                &format!("accounts.{}", spec.name),
                "the name is used twice",
                "give every [[accounts]] table its own name",
            ));
        }
        specs.push(spec);
    }
    Ok(specs)
}

fn spec(
    index: usize,
    t: &AccountTable,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<AccountSpec, ConfigError> {
    let name = match t.name.as_deref().map(str::trim) {
        Some(n) if valid_name(n) => n.to_owned(),
        Some(_) => {
            return Err(bad(
                &format!("accounts[{index}].name"),
                "must be 1-64 letters, digits, `_`, `-` or `.`",
                "e.g. name = \"captchaai-main\" (it appears in /health and metric labels)",
            ));
        }
        None => {
            return Err(bad(
                &format!("accounts[{index}].name"),
                "is missing",
                "give each account a name, e.g. name = \"captchaai-main\"",
            ));
        }
    };
    let at = |field: &str| format!("accounts.{name}.{field}");
    if t.key.is_some() {
        return Err(bad(
            &at("key"),
            "a key is never written in the config file",
            "put it in a variable and set key_env = \"VAR\", or in a file and set key_file = \"path\"",
        ));
    }
    let provider = t.provider.ok_or_else(|| {
        bad(
            &at("provider"),
            "is missing",
            "set provider = \"captchaai\", \"2captcha\", \"anticaptcha\", \"capsolver\" or \"sim\"",
        )
    })?;
    let base_url = match &t.base_url {
        None => None,
        Some(raw) => Some(
            url::Url::parse(raw)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
                .ok_or_else(|| {
                    bad(
                        &at("base_url"),
                        "is not an http(s) URL",
                        "write a base URL such as https://api.example.com or http://127.0.0.1:8081",
                    )
                })?,
        ),
    };
    let key = key(&name, provider, t, env)?;
    if let Some(threads) = t.threads {
        if !(1..=MAX_THREADS).contains(&threads) {
            return Err(bad(
                &at("threads"),
                format!("must be from 1 to {MAX_THREADS}"),
                "set the plan's thread count, e.g. threads = 15",
            ));
        }
    }
    let weight = t.weight.unwrap_or(1);
    if !(1..=MAX_WEIGHT).contains(&weight) {
        return Err(bad(
            &at("weight"),
            format!("must be from 1 to {MAX_WEIGHT}"),
            "e.g. weight = 2 for twice the share of an account with weight 1",
        ));
    }
    let mut kinds = Vec::new();
    for k in &t.kinds {
        let kind: Kind = k.parse().map_err(|e: String| {
            bad(
                &at("kinds"),
                e,
                "list kind names, e.g. kinds = [\"recaptcha_v2\", \"turnstile\"]",
            )
        })?;
        if !provider.solves(kind) {
            return Err(bad(
                &at("kinds"),
                format!("{provider} does not solve {kind}"),
                "leave the kind to an account whose provider solves it (docs/API.md \"Task types\")",
            ));
        }
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(AccountSpec {
        name,
        provider,
        base_url,
        key,
        threads: t.threads,
        weight,
        kinds,
    })
}

/// The key from `key_env` or `key_file`, exactly one of them (optional for the simulator).
fn key(
    name: &str,
    provider: AccountProvider,
    t: &AccountTable,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Secret>, ConfigError> {
    let at = |field: &str| format!("accounts.{name}.{field}");
    let raw = match (&t.key_env, &t.key_file) {
        (Some(_), Some(_)) => {
            return Err(bad(
                &at("key_env"),
                "and key_file are both set",
                "keep one of them",
            ));
        }
        (Some(var), None) => Some(env(var).ok_or_else(|| {
            // The variable's name is not secret; its value is.
            bad(
                &at("key_env"),
                format!("the variable {var} is not set"),
                format!("export {var}=<the account's key>"),
            )
        })?),
        (None, Some(path)) => Some(std::fs::read_to_string(path).map_err(|e| {
            bad(
                &at("key_file"),
                format!("cannot read {}: {}", path.display(), e.kind()),
                "point it at a readable file holding the key",
            )
        })?),
        (None, None) if provider == AccountProvider::Sim => None,
        (None, None) => {
            return Err(bad(
                &at("key_env"),
                "no key source is set",
                "set key_env = \"VAR\" (a variable holding the key) or key_file = \"path\"",
            ));
        }
    };
    match raw.map(|k| k.trim().to_owned()) {
        Some(k) if k.is_empty() => Err(bad(
            &at(if t.key_env.is_some() {
                "key_env"
            } else {
                "key_file"
            }),
            "the key is empty",
            "put the account's key there",
        )),
        Some(k) if k.chars().any(|c| c.is_control() || c.is_whitespace()) => Err(bad(
            &at(if t.key_env.is_some() {
                "key_env"
            } else {
                "key_file"
            }),
            "the key holds spaces or control characters",
            "put only the key there, on one line",
        )),
        other => Ok(other.map(Secret)),
    }
}

fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, env: &[(&str, &str)]) -> Result<Vec<AccountSpec>, String> {
        #[derive(Deserialize)]
        struct File {
            accounts: Vec<AccountTable>,
        }
        let file: File = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        let lookup = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        specs(&file.accounts, &lookup).map_err(|e| e.to_string())
    }

    const MAIN: &str =
        "[[accounts]]\nname = \"main\"\nprovider = \"captchaai\"\nkey_env = \"K1\"\n";

    #[test]
    fn a_full_table_is_read_with_its_defaults() {
        let text = format!(
            "{MAIN}threads = 15\nweight = 3\nkinds = [\"turnstile\", \"recaptcha_v2\", \"turnstile\"]\n\
             [[accounts]]\nname = \"local\"\nprovider = \"sim\"\nbase_url = \"http://127.0.0.1:9\"\n"
        );
        let specs = parse(&text, &[("K1", " KeyOne0123456789abcdef0123456789\n")]).unwrap();
        assert_eq!(specs.len(), 2);
        let main = &specs[0];
        assert_eq!(main.provider, AccountProvider::Captchaai);
        assert_eq!(
            main.key.as_ref().unwrap().0,
            "KeyOne0123456789abcdef0123456789"
        );
        assert_eq!((main.threads, main.weight), (Some(15), 3));
        assert_eq!(main.kinds, vec![Kind::Turnstile, Kind::RecaptchaV2]);
        assert!(main.takes(Kind::Turnstile) && !main.takes(Kind::Image));
        let local = &specs[1];
        assert_eq!(
            (local.key.clone(), local.threads, local.weight),
            (None, None, 1)
        );
        assert!(local.takes(Kind::Image), "no kinds means every kind");
        assert_eq!(
            local.base_url.as_ref().unwrap().as_str(),
            "http://127.0.0.1:9/"
        );
    }

    #[test]
    fn a_loaded_key_never_shows_in_debug_output() {
        let specs = parse(MAIN, &[("K1", "LoadedKeyDebug0123456789abcdef01")]).unwrap();
        let shown = format!("{specs:?}");
        assert!(
            shown.contains("main") && !shown.contains("LoadedKeyDebug"),
            "{shown}"
        );
    }

    #[test]
    fn only_thread_priced_captchaai_is_not_billed_per_solve() {
        assert!(!AccountProvider::Captchaai.billed_per_solve());
        assert!(AccountProvider::TwoCaptcha.billed_per_solve());
        assert!(AccountProvider::Sim.billed_per_solve());
    }

    #[test]
    fn a_key_in_the_file_is_refused_without_echoing_it() {
        let text =
            "[[accounts]]\nname = \"main\"\nprovider = \"2captcha\"\nkey = \"SecretInFile\"\n";
        let line = parse(text, &[]).unwrap_err();
        assert!(line.starts_with("accounts.main.key: "), "{line}");
        assert!(
            line.contains("key_env") && !line.contains("SecretInFile"),
            "{line}"
        );
    }

    #[test]
    fn each_bad_field_is_named_with_its_fix() {
        // (file, environment, the start of the one-line error)
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
        let cases: &[Case] = &[
            (
                "[[accounts]]\nprovider = \"sim\"\n",
                &[],
                "accounts[0].name",
            ),
            (
                "[[accounts]]\nname = \"a b\"\nprovider = \"sim\"\n",
                &[],
                "accounts[0].name",
            ),
            ("[[accounts]]\nname = \"a\"\n", &[], "accounts.a.provider"),
            (
                MAIN,
                &[],
                "accounts.main.key_env: the variable K1 is not set",
            ),
            (
                MAIN,
                &[("K1", "  ")],
                "accounts.main.key_env: the key is empty",
            ),
            (
                MAIN,
                &[("K1", "two words")],
                "accounts.main.key_env: the key holds",
            ),
            (
                "[[accounts]]\nname = \"a\"\nprovider = \"captchaai\"\n",
                &[],
                "accounts.a.key_env: no key source",
            ),
            (
                "[[accounts]]\nname = \"a\"\nprovider = \"sim\"\nkey_env = \"K\"\nkey_file = \"f\"\n",
                &[("K", "k")],
                "accounts.a.key_env: and key_file",
            ),
            (
                "[[accounts]]\nname = \"a\"\nprovider = \"sim\"\nkey_file = \"/nonexistent/k\"\n",
                &[],
                "accounts.a.key_file: cannot read",
            ),
            (
                &format!("{MAIN}threads = 0\n"),
                &[("K1", "k")],
                "accounts.main.threads",
            ),
            (
                &format!("{MAIN}weight = 0\n"),
                &[("K1", "k")],
                "accounts.main.weight",
            ),
            (
                &format!("{MAIN}weight = 1001\n"),
                &[("K1", "k")],
                "accounts.main.weight",
            ),
            (
                &format!("{MAIN}kinds = [\"keycaptcha\"]\n"),
                &[("K1", "k")],
                "accounts.main.kinds",
            ),
            (
                "[[accounts]]\nname = \"ac\"\nprovider = \"anticaptcha\"\nkey_env = \"K1\"\nkinds = [\"text\"]\n",
                &[("K1", "k")],
                "accounts.ac.kinds: anticaptcha does not solve text",
            ),
            (
                &format!("{MAIN}base_url = \"ftp://x\"\n"),
                &[("K1", "k")],
                "accounts.main.base_url",
            ),
            (
                &format!("{MAIN}{MAIN}"),
                &[("K1", "k")],
                "accounts.main: the name is used twice",
            ),
        ];
        for (text, env, expected) in cases {
            let line = parse(text, env).unwrap_err();
            assert!(line.starts_with(expected), "{text}\n=> {line}");
            assert_eq!(line.lines().count(), 1, "{line}");
        }
    }

    #[test]
    fn an_unknown_provider_or_field_is_a_toml_error() {
        let unknown = "[[accounts]]\nname = \"a\"\nprovider = \"deathbycaptcha\"\n";
        assert!(parse(unknown, &[]).is_err());
        let typo = "[[accounts]]\nname = \"a\"\nprovider = \"sim\"\nthread = 5\n";
        assert!(parse(typo, &[]).unwrap_err().contains("thread"));
    }
}
